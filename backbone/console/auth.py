"""Login, sessions, roles and CSRF.

Passwords are argon2id hashes (argon2-cffi); sessions live in encrypted, signed cookies (aiohttp-session's
EncryptedCookieStorage, Fernet from `cryptography`), HttpOnly and SameSite=Strict. Every POST must carry the
session's CSRF token (form field `csrf_token` or header `X-CSRF-Token`); viewers get 403 on every action.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp_session import get_session, new_session
from aiohttp_session import setup as setup_sessions
from aiohttp_session.cookie_storage import EncryptedCookieStorage
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from backbone.console.config import ConsoleConfig

log = logging.getLogger(__name__)

COOKIE = "backbone_console"
SESSION_MAX_AGE_S = 12 * 3600
OPEN_PATHS = ("/login", "/static/", "/metrics", "/api/openapi.json")
_hasher = PasswordHasher()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
USER = web.RequestKey("user", str)
ROLE = web.RequestKey("role", str)
CSRF = web.RequestKey("csrf", str)


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def check_password(config: ConsoleConfig, name: str, password: str) -> str | None:
    """The user's role when the password is right, else None (the same work either way)."""
    user = config.user(name)
    if user is None:
        _hasher.hash(password)  # spend the same time as a real check: names cannot be probed by timing
        return None
    try:
        _hasher.verify(user.password_hash, password)
    except (VerificationError, InvalidHashError):
        return None
    return user.role


def install(app: web.Application, config: ConsoleConfig) -> None:
    key = hashlib.sha256(config.session_secret).digest()  # 32 raw bytes: the storage makes the Fernet key
    storage = EncryptedCookieStorage(
        key, cookie_name=COOKIE, httponly=True, samesite="Strict", max_age=SESSION_MAX_AGE_S
    )
    setup_sessions(app, storage)
    app.middlewares.append(_require_login)


async def login_token(request: web.Request) -> None:
    """The login form's CSRF token: kept in a session that has no user yet, so that another site cannot log
    a browser in under an account of its choosing."""
    session = await get_session(request)
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    request[CSRF] = session["csrf"]


async def check_login_token(request: web.Request, given: str) -> None:
    expected = (await get_session(request)).get("csrf", "")
    if not given or not expected or not hmac.compare_digest(given, expected):
        raise web.HTTPForbidden(
            text="the login form's CSRF token is missing or wrong: reload the page and try again"
        )


async def log_in(request: web.Request, name: str, role: str) -> None:
    session = await new_session(request)
    session["user"] = name
    session["role"] = role
    session["csrf"] = secrets.token_urlsafe(32)


async def log_out(request: web.Request) -> None:
    (await get_session(request)).invalidate()


@web.middleware
async def _require_login(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith(OPEN_PATHS):
        return await handler(request)
    session = await get_session(request)
    user = session.get("user")
    if not user:
        if request.path.startswith("/api/"):
            raise web.HTTPUnauthorized(text="log in first: POST /login with user and password")
        raise web.HTTPSeeOther(f"/login?next={request.path_qs}")
    request[USER] = user
    request[ROLE] = session.get("role", "viewer")
    request[CSRF] = session.get("csrf", "")
    if request.method == "POST":
        form = await request.post()
        given = str(form.get("csrf_token") or request.headers.get("X-CSRF-Token") or "")
        if not given or not hmac.compare_digest(given, request[CSRF]):
            log.warning("event=csrf_rejected user=%s path=%s", user, request.path)
            raise web.HTTPForbidden(
                text="the form's CSRF token is missing or wrong: reload the page and try again"
            )
    return await handler(request)


def require_operator(request: web.Request) -> None:
    if request.get(ROLE) != "operator":
        raise web.HTTPForbidden(
            text=f"user {request.get(USER)} is a viewer: only operators may change clusters"
        )
