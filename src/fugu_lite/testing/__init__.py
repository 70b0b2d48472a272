"""Test helpers that ship with the package: a real in-process OpenAI-compatible server."""
