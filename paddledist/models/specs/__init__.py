"""Per-family model tables (plain data: importing them never imports paddle)."""
