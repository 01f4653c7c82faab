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

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, PROFILES  # noqa: E402

PAGE = ROOT / "docs" / "design" / "cost-model.md"
BEGIN, END = "<!-- profiles:begin -->", "<!-- profiles:end -->"
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
    if page.count(BEGIN) != 1 or page.count(END) != 1:
        raise SystemExit(f"make_profile_docs: {PAGE.relative_to(ROOT)} needs one {BEGIN} ... {END} block")
    head, rest = page.split(BEGIN)
    return f"{head}{BEGIN}\n{block()}{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the block is stale")
    args = p.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    new = render(page)
    if args.check:
        return int(new != page)
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
