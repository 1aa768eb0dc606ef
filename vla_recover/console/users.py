"""Console users: names, roles, salted password hashes and hashed API tokens, in one SQLite file.

Passwords are stored as PBKDF2-HMAC-SHA256 with a per-user salt; API tokens (for scripts and the console's own
sessions) only as their SHA-256, so a copied file gives away neither. Roles are ``viewer`` (look), ``floor``
(takeover requests, resets, pauses, e-stops), ``teleop`` (take a robot over and drive it, e-stop) and ``admin``
(everything).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

__all__ = ["ROLES", "Role", "User", "UserDB", "UserError"]

Role = Literal["viewer", "floor", "teleop", "admin"]
ROLES: tuple[str, ...] = get_args(Role)
ITERATIONS = 200_000
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class UserError(ValueError):
    """A bad user name, role or password, or an unknown user."""


@dataclass(frozen=True)
class User:
    name: str
    role: str


def _hash_password(password: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, ITERATIONS)


def _hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class UserDB:
    """``path`` is created on first use; every call opens its own connection, so any thread may call."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, role TEXT NOT NULL, salt BLOB, hash BLOB)"
            )
            db.execute("CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, name TEXT NOT NULL, label TEXT)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10.0)

    def add(self, name: str, role: str, password: str | None = None) -> None:
        if not NAME.match(name):
            raise UserError(f"name: {name!r} must be 1-64 letters, digits, '_', '.' or '-'")
        if role not in ROLES:
            raise UserError(f"role: {role!r} is not one of {', '.join(ROLES)}")
        if password is not None and len(password) < 8:
            raise UserError("password: at least 8 characters")
        salt = secrets.token_bytes(16)
        digest = _hash_password(password, salt) if password is not None else None
        with self._connect() as db:
            if db.execute("SELECT 1 FROM users WHERE name = ?", (name,)).fetchone():
                raise UserError(f"name: user {name!r} exists")
            db.execute("INSERT INTO users VALUES (?, ?, ?, ?)", (name, role, salt, digest))

    def user(self, name: str) -> User:
        with self._connect() as db:
            row = db.execute("SELECT name, role FROM users WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UserError(f"name: no user {name!r}")
        return User(*row)

    def users(self) -> list[User]:
        with self._connect() as db:
            return [User(*row) for row in db.execute("SELECT name, role FROM users ORDER BY name")]

    def check_password(self, name: str, password: str) -> User | None:
        """The user, or None for a wrong name or password (the same answer, in about the same time, for both)."""
        with self._connect() as db:
            row = db.execute("SELECT role, salt, hash FROM users WHERE name = ?", (name,)).fetchone()
        role, salt, stored = row if row else ("", b"\0" * 16, None)
        digest = _hash_password(password, salt)
        if stored is None or not hmac.compare_digest(digest, stored):
            return None
        return User(name, role)

    def issue_token(self, name: str, label: str = "api") -> str:
        """A new bearer token for ``name``; only its hash is kept, so it is shown once."""
        self.user(name)
        token = secrets.token_urlsafe(32)
        with self._connect() as db:
            db.execute("INSERT INTO tokens VALUES (?, ?, ?)", (_hash_token(token), name, label))
        return token

    def revoke_token(self, token: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM tokens WHERE hash = ?", (_hash_token(token),))

    def check_token(self, token: str) -> User | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT users.name, users.role FROM tokens JOIN users ON users.name = tokens.name "
                "WHERE tokens.hash = ?",
                (_hash_token(token),),
            ).fetchone()
        return User(*row) if row else None
