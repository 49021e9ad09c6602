// Lighthouse's scores for console pages, as a signed-in person sees them (tests/test_lighthouse_browser.py).
//
// Reads one JSON object on stdin: {chromePath, chromeFlags, cookies: [{name, value, url}], runs: [{url, size}],
// categories}, where size is "desktop" (Lighthouse's desktop preset) or "mobile" (its default phone). One Chromium
// is started for every run; the session's cookies go into its cookie jar first, so the page and every call it
// makes carry them, exactly as in a person's browser. Prints one JSON array: per run, its url and size, each
// category's score and, per category, the audits that cost it points, and hints: what would make it faster.

import * as chromeLauncher from "chrome-launcher";
import lighthouse from "lighthouse";
import desktopConfig from "lighthouse/core/config/desktop-config.js";
import puppeteer from "puppeteer-core";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const job = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const chrome = await chromeLauncher.launch({ chromePath: job.chromePath, chromeFlags: job.chromeFlags });
const results = [];
try {
  const browser = await puppeteer.connect({ browserURL: `http://127.0.0.1:${chrome.port}` });
  const page = await browser.newPage();
  await page.setCookie(...job.cookies);
  await page.close();
  browser.disconnect();
  for (const run of job.runs) {
    const flags = { port: chrome.port, output: "json", logLevel: "error", onlyCategories: job.categories };
    let answer = await lighthouse(run.url, flags, run.size === "desktop" ? desktopConfig : undefined);
    if (answer.lhr.runtimeError) answer = await lighthouse(run.url, flags, run.size === "desktop" ? desktopConfig : undefined); // once more: the tool failed, not the page
    const lhr = answer.lhr;
    const categories = {};
    const lost = {};
    for (const [name, category] of Object.entries(lhr.categories)) {
      categories[name] = category.score ?? 0;
      lost[name] = category.auditRefs
        .filter((ref) => ref.weight > 0 && lhr.audits[ref.id].score !== null && lhr.audits[ref.id].score < 1)
        .map((ref) => `${ref.id}: ${lhr.audits[ref.id].title} (${lhr.audits[ref.id].score}; ${lhr.audits[ref.id].displayValue || ""})`);
    }
    // what would make the page faster (an opportunity's savings) and what moved while it loaded
    const hints = Object.values(lhr.audits)
      .filter((a) => a.details && a.details.type === "opportunity" && (a.details.overallSavingsMs > 0 || a.details.overallSavingsBytes > 0))
      .map((a) => `${a.id}: ${a.displayValue || ""} ${(a.details.items || []).slice(0, 3).map((i) => i.url || "").join(" ")}`);
    const shifts = lhr.audits["layout-shifts"];
    if (shifts && shifts.details && shifts.details.items) {
      for (const item of shifts.details.items.slice(0, 5)) hints.push(`layout shift ${item.score.toFixed(3)}: ${item.node ? item.node.selector || item.node.snippet : "?"}`);
    }
    const problems = lhr.runtimeError ? [lhr.runtimeError.message] : lhr.runWarnings;
    results.push({ url: run.url, size: run.size, categories, lost, problems, hints });
  }
} finally {
  await chrome.kill();
}
process.stdout.write(JSON.stringify(results));
