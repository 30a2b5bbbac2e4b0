"""Typed dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from fastapi.templating import Jinja2Templates
from starlette.requests import HTTPConnection

from flashscope.app.config import Settings
from flashscope.app.traces import TraceService


def get_settings_dep(conn: HTTPConnection) -> Settings:
    settings: Settings = conn.app.state.settings
    return settings


def get_templates(conn: HTTPConnection) -> Jinja2Templates:
    templates: Jinja2Templates = conn.app.state.templates
    return templates


def get_traces(conn: HTTPConnection) -> TraceService:
    traces: TraceService = conn.app.state.traces
    return traces


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
TemplatesDep = Annotated[Jinja2Templates, Depends(get_templates)]
TracesDep = Annotated[TraceService, Depends(get_traces)]
