"""``replmon dashboards push``: upload the dashboards to Grafana with grafana-client.

Every failure is one ReplmonError line that says what to check; the token never appears in it (it is sent
only in the Authorization header, and scrubbed from any message Grafana sends back).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from grafana_client import GrafanaApi
from grafana_client.client import (
    GrafanaClientError,
    GrafanaException,
    GrafanaServerError,
    GrafanaTimeoutError,
    GrafanaUnauthorizedError,
)

from replmon.core.config import GrafanaConfig
from replmon.core.errors import ReplmonError

TIMEOUT_S = 10.0


def safe_url(url: str) -> str:
    """The URL without user info (``http://user:pass@host`` must not be printed)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def push(cfg: GrafanaConfig, dashboards: dict[str, dict[str, Any]], timeout_s: float = TIMEOUT_S) -> str:
    """Create the folder ``cfg.folder`` if missing and upload every dashboard into it (overwriting by uid).
    Returns the folder's uid."""
    if cfg.token is None:
        raise ReplmonError("grafana.token is not set: create a service account token with the Editor role in "
                           "Grafana and set grafana.token (or REPLMON_GRAFANA__TOKEN)")
    token = cfg.token.get_secret_value()
    where = safe_url(cfg.url)
    if urlsplit(cfg.url).scheme not in ("http", "https"):
        raise ReplmonError(f"grafana.url {where!r} must start with http:// or https://")
    api = GrafanaApi.from_url(cfg.url, credential=token, timeout=timeout_s)
    step = f"looking up folder {cfg.folder!r}"
    try:
        folder_uid = _folder(api, cfg.folder)
        for uid, board in dashboards.items():
            step = f"the upload of dashboard {uid}"
            api.dashboard.update_dashboard({"dashboard": {**board, "id": None}, "folderUid": folder_uid,
                                            "overwrite": True, "message": "replmon dashboards push"})
    except GrafanaUnauthorizedError:
        raise ReplmonError(f"Grafana at {where} refused the token (HTTP 401 Unauthorized): check grafana.token") \
            from None
    except GrafanaClientError as exc:
        if exc.status_code == 403:
            raise ReplmonError(f"Grafana at {where} refused {step} (HTTP 403 Forbidden): the token's service "
                               f"account needs the Editor role (or folder permissions on {cfg.folder!r})") from None
        raise ReplmonError(f"Grafana at {where} rejected {step} (HTTP {exc.status_code}): "
                           f"{_scrub(_message(exc), token)}") from None
    except GrafanaTimeoutError:
        raise ReplmonError(f"Grafana at {where} did not answer within {timeout_s:g} s ({step})") from None
    except GrafanaServerError as exc:
        raise ReplmonError(f"Grafana at {where} failed {step} (HTTP {exc.status_code}): "
                           f"{_scrub(_message(exc), token)}") from None
    except GrafanaException as exc:
        raise ReplmonError(f"Grafana at {where} is unreachable ({step}): {_scrub(str(exc.message), token)}") \
            from None
    except OSError as exc:  # niquests' ConnectionError and friends
        raise ReplmonError(f"Grafana at {where} is unreachable: {_scrub(_reason(exc), token)}") from None
    except ValueError:  # an answer that is not JSON: not Grafana's API
        raise ReplmonError(f"{where} does not answer like Grafana's HTTP API ({step}): check grafana.url") \
            from None
    return folder_uid


def _folder(api: GrafanaApi, title: str) -> str:
    for folder in api.folder.get_all_folders() or []:
        if isinstance(folder, dict) and folder.get("title") == title:
            return str(folder["uid"])
    created = api.folder.create_folder(title)
    return str(created["uid"])


def _message(exc: GrafanaException) -> str:
    response = exc.response
    if isinstance(response, dict) and "message" in response:
        return str(response["message"])
    return str(exc.message)[:200]


def _reason(exc: OSError) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out", "No route to host",
                   "certificate verify failed"):
        if marker.lower() in text.lower():
            return marker.lower()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "**********") if secret else text
