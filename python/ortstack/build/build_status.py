"""The status section for variants and their wheels: valid or refused, built or not, from which pin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ortstack.build import buildinfo, variants, wheel
from ortstack.errors import OrtstackError
from ortstack.patches import series
from ortstack.status import Section

if TYPE_CHECKING:
    from ortstack.status import StatusContext


def section(context: StatusContext) -> Section | None:
    stack, dist = context.stack, context.settings.dist_dir
    if not stack.variants:
        return None
    platform = series.host_platform()
    rows: list[list[str]] = []
    notes: list[str] = []
    for variant in stack.variants:
        try:
            variants.validate(variant, platform)
        except OrtstackError as exc:
            rows.append([variant.name, variant.kind, f"REFUSED: {exc.message}", "-", "-"])
            continue
        plan = variants.KINDS[variant.kind].wheel(variant, platform)
        built = wheel.wheels_of(dist, plan.name, variant.name)
        if not built:
            rows.append([variant.name, variant.kind, plan.name, "not built", "-"])
            continue
        newest = built[-1]
        try:
            info = buildinfo.read_from_wheel(newest)
        except OrtstackError as exc:
            rows.append([variant.name, variant.kind, plan.name, newest.name, exc.message])
            continue
        origin = f"{info.tree_commit[:12]} on {info.ort_commit[:12]}"
        if info.ort_commit != stack.ort.commit:
            origin += " (OTHER PIN)"
            notes.append(f"{newest.name} was built from another pin: run `ortstack build --variant {variant.name}`")
        rows.append([variant.name, variant.kind, plan.name, newest.name, origin])
    return Section(
        title=f"variants and wheels ({dist})",
        columns=["variant", "kind", "wheel name", "in dist", "built from"],
        rows=rows,
        notes=tuple(notes),
    )
