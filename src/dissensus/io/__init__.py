"""Input and output at the edges: JSONL streams, rejects."""

from dissensus.io.jsonl import Reject, RejectSink, open_text, read_models, write_jsonl_line

__all__ = ["Reject", "RejectSink", "open_text", "read_models", "write_jsonl_line"]
