"""The Mini App with each card's details (``[webapp]``): its page and static files, served
on the bot's HTTP server under the path of ``webapp.url``."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from bot.config import WebAppConfig

STATIC: Final = Path(__file__).parent / "webapp_static"
STATIC_FILES: Final = frozenset({"app.js", "style.css"})
BASE_MARK: Final = "%BASE%"
"""Replaced in ``index.html`` by the path the app is served under."""


class _Page:
    def __init__(self, config: WebAppConfig) -> None:
        html = (STATIC / "index.html").read_text(encoding="utf-8")
        self._html = html.replace(BASE_MARK, config.path)

    async def index(self, request: Request) -> Response:
        return HTMLResponse(self._html, headers={"Cache-Control": "no-store"})

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response("Not Found\n", status_code=404, media_type="text/plain")
        return FileResponse(STATIC / name, headers={"Cache-Control": "no-cache"})


def webapp_routes(config: WebAppConfig) -> list[BaseRoute]:
    """The Mini App's routes, for :class:`bot.tg.webhook.HttpServer`."""
    page = _Page(config)
    base = config.path
    routes: list[BaseRoute] = [
        Route(f"{base}/", page.index, methods=["GET"]),
        Route(f"{base}/static/{{name}}", page.static, methods=["GET"]),
    ]
    if base:
        routes.append(Route(base, page.index, methods=["GET"]))
    return routes
