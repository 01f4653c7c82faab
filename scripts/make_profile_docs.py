"""Write the hardware-profile table of docs/design/cost-model.md from the profiles themselves.

The block between ``<!-- profiles:begin -->`` and ``<!-- profiles:end -->`` is rendered from
:data:`pbkv_server.hardware.profiles.PROFILES` (the figures ``pbkv-bench profiles`` prints) and
the cost model's own functions (:class:`pbkv_server.engine.cost.HardwareProfile`), so a changed
profile cannot leave the page behind: ``tests/docs/test_profile_docs.py`` fails until this script
is rerun. Nothing here is measured; every figure is derived from the profile's inputs.

Usage::

    .venv/bin/python scripts/make_profile_docs.py           # rewrite the block
    .venv/bin/python scripts/make_profile_docs.py --check   # exit 1 if the block is stale
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from generated_blocks import replace_block, write_or_check  # noqa: E402
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, PROFILES  # noqa: E402

PAGE = ROOT / "docs" / "design" / "cost-model.md"
BLOCK = "profiles"
#: The worked example under the table: a prompt of this many tokens, a decode batch of this many
#: sequences holding this many tokens each (about PBKV Table 4's concurrency).
EXAMPLE_TOKENS, EXAMPLE_BATCH, EXAMPLE_CONTEXT = 1000, 72, 1100


def block() -> str:
    """The block's body: one table row per profile, then the default profile's worked example."""
    rows = ["| profile | prefill tok/s | decode base | per 1k context tokens | PCIe | KV B/token | device tok "
            "| host tok |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, p in PROFILES.items():
        label = f"`{name}`" + (" (default)" if name == DEFAULT_PROFILE else "")
        rows.append(f"| {label} | {p.prefill_tokens_per_s:,.0f} | {p.decode_base_s * 1e3:.1f} ms "
                    f"| {p.decode_per_token_s * 1e6:.3f} ms | {p.pcie_bytes_per_s / 1e9:.2f} GB/s "
                    f"| {p.kv_bytes_per_token:,} | {p.device_kv_tokens:,} | {p.host_kv_tokens:,} |")
    d = PROFILES[DEFAULT_PROFILE]
    step = d.decode_step_time(EXAMPLE_BATCH, EXAMPLE_BATCH * EXAMPLE_CONTEXT)
    example = (f"On the default profile {EXAMPLE_TOKENS:,} tokens take {d.prefill_time(EXAMPLE_TOKENS) * 1e3:.0f} ms "
               f"to prefill and {d.load_time(EXAMPLE_TOKENS) * 1e3:.1f} ms to load from the host, and a decode step "
               f"of {EXAMPLE_BATCH} sequences holding {EXAMPLE_CONTEXT:,} tokens each takes {step * 1e3:.0f} ms.")
    return "\n".join(rows) + "\n\n" + example + "\n"


def render(page: str) -> str:
    """``page`` with its profiles block rewritten."""
    return replace_block(page, BLOCK, block(), str(PAGE.relative_to(ROOT)))


def main(argv: list[str] | None = None) -> int:
    return write_or_check("make_profile_docs", PAGE, render, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
