"""The `logbus` command line: `serve` runs a broker; the rest are client tools."""
