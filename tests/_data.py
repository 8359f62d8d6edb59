"""Data files the tests read from the repository itself (never from beside the checkout)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the first 20,000 records of the HPC2N log (workloads/README.md: provenance and terms)
HPC2N = REPO / "workloads" / "HPC2N-2002-2.1-cln-first20000.swf.gz"
