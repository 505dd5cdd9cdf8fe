"""Execution receipts (D14): the format lives in grantd.receipts, one module the target hosts'
`grantd elevate` may import too (it builds receipts; the log and the verifier check them). This
module names it for the log's own code, so there is one format in one place."""

from __future__ import annotations

from grantd.receipts import (
    HOST_PREFIX,
    RECEIPT_TYP,
    RESULTS,
    BadReceipt,
    Receipt,
    UnknownHost,
    build_receipt,
    check_host_name,
    host_public_key_line,
    receipt_host,
    receipt_key,
    verify_receipt,
)

__all__ = [
    "HOST_PREFIX",
    "RECEIPT_TYP",
    "RESULTS",
    "BadReceipt",
    "Receipt",
    "UnknownHost",
    "build_receipt",
    "check_host_name",
    "host_public_key_line",
    "receipt_host",
    "receipt_key",
    "verify_receipt",
]
