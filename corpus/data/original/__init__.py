"""The four original-suite traces (JSONL) and their probe files (JSON), as package data."""
