"""Shared rules below every tool: where files may be opened (`paths`), what output must hide
(`redact`), where HTTP requests may go (`net`, the SSRF-safe client). Each module is imported
where it is used; nothing is imported here, so `import jarvis` stays fast."""
