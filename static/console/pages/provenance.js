// Where an assistant's request or automation may come from (SPEC §23): each provenance flag in plain words, right
// under the title on the page that decides it (/outbound, /automations), with a link to the e-mail the assistant read.
import { el, when } from "../lib.js";

// each flag in plain words, first on the page: a person decides knowing what the assistant read before asking
const ago = (at) => (at ? when(at) : "");
const readLink = (e, text) => (e.thread_id ? el("a", { href: `/mail/t/${encodeURIComponent(e.thread_id)}`, "data-message-id": e.message_id || "" }, text) : text);
const FLAG_WORDS = {
  recipient_from_untrusted: (e) => [`The address ${e.recipient} appears only in an e-mail from ${e.sender} that the assistant read ${ago(e.read_at)}. Nobody here has written to it. `, readLink(e, "Open that e-mail")],
  content_from_untrusted: (e) => [e.read_at
    ? `Part of this e-mail is copied from an e-mail from ${e.sender} that the assistant read ${ago(e.read_at)}, and it goes to someone else. `
    : `An attached file is one received from ${e.sender}, and it goes to someone else. `, readLink(e, "Open that e-mail")],
  first_contact: (e) => [`Nobody here has written to ${e.recipient} before.`],
  reads_unrecorded: (e) => [`What this assistant read could not be recorded for a while, so where this comes from is unknown: you decide what it asks for until ${when(e.until)}.`],
  after_untrusted_read: (e) => [`Before asking, the assistant read an e-mail from ${e.sender || "an unknown sender"}, whom nobody here has written to (${ago(e.read_at)}). `, readLink(e, "Open that e-mail")],
};

export function provenanceSection(p) {
  if (!p || (!p.flags.length && !p.lockdown)) return "";
  const items = p.evidence.map((e) => el("li", { "data-flag": e.flag }, ...(FLAG_WORDS[e.flag] ? FLAG_WORDS[e.flag](e) : [e.flag])));
  if (p.lockdown) items.unshift(el("li", { "data-flag": "lockdown" }, "This key or connection is locked down, and it read mail from someone nobody here has written to: you decide everything it asks for."));
  return el("section", { class: "provenance", "data-flags": p.flags.join(" ") },
    el("h4", {}, "Where this request may come from"),
    el("ul", {}, items));
}
