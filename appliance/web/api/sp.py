"""Routes: see the module's issue (OAuth / device grant / SP). Filled in by their owners."""

from sanic import Blueprint

bp = Blueprint("sp")
