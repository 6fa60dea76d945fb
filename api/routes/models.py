"""``GET /v1/models`` (SPEC §2.5)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from decide.api.routes.deps import Context, Owner
from decide.core.protocol import DEFAULT_MODEL_ALIAS

router = APIRouter()


@router.get("/v1/models")
def list_models(ctx: Context, _: Owner) -> dict[str, Any]:
    catalog = ctx.catalog
    listed: list[dict[str, Any]] = []
    for name, config in catalog.models.items():
        planner = ctx.planners.get(name)
        release = config.release_date or (planner.profile.release_date if planner else None)
        entry: dict[str, Any] = {"name": name, "description": config.description or name,
                                 "release_date": release or ""}
        if name == catalog.default:
            entry["x_default"] = True
            listed.insert(0, entry)
            listed.insert(1, {"name": DEFAULT_MODEL_ALIAS, "description": f"alias of {name}",
                              "release_date": entry["release_date"], "x_alias_of": name})
        else:
            listed.append(entry)
    return {"models": listed}
