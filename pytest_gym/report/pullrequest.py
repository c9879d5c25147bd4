"""One sticky comment on a pull request (GitHub) or merge request (GitLab): created once, updated after.

The comment is found again by its hidden marker (``<!-- pytest-gym-comment -->``) among the existing
comments, read page by page; a second run updates it instead of adding another. Where to post comes from
the CI's environment, or from options:

GitHub Actions
    token ``GITHUB_TOKEN`` (or the variable ``--token-var`` names), API ``GITHUB_API_URL`` (GitHub Enterprise)
    else ``https://api.github.com``, repository ``GITHUB_REPOSITORY``, pull request from the event
    (``GITHUB_EVENT_PATH``: ``pull_request.number``, an issue comment's ``issue.number``) or ``GITHUB_REF``
    (``refs/pull/N/merge``).
GitLab CI
    API ``CI_API_V4_URL``, project ``CI_PROJECT_ID``, merge request ``CI_MERGE_REQUEST_IID``; token
    ``CI_JOB_TOKEN`` (sent as ``JOB-TOKEN``) or the variable ``--token-var`` names (a project or personal access
    token, sent as ``PRIVATE-TOKEN``).

A post that fails (401, 403, 404, no network, no pull request) raises ``PostError`` saying why and what to
change; the token is in no message (masked, and removed by value). Standard library only; redirects are not
followed, so the token goes to the API's own origin alone.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from pytest_gym.core.masking import MAX_MESSAGE, add_secret, clean_text
from pytest_gym.core.numbers import is_int

Platform = Literal["github", "gitlab"]
#: Comments read to find the marker: pages of 100, at most this many pages.
MAX_PAGES = 50
PER_PAGE = 100
TIMEOUT_S = 30.0
#: The largest answer read from the API (a page of 100 long comments is a few MB).
MAX_BODY = 32 << 20


class PostError(Exception):
    """The comment could not be posted; the message says why (never the token)."""


@dataclass(frozen=True)
class Target:
    """Where the comment goes and how to authenticate; ``token`` is never shown."""

    platform: Platform
    api: str
    #: The list/create URL of the pull request's comments (GitHub issue comments, GitLab MR notes).
    comments_url: str
    #: The URL of one comment, ``{id}`` in it.
    comment_url: str
    where: str
    token: str = field(repr=False)
    token_header: str = field(default="Authorization", repr=False)

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": "application/json", "User-Agent": "pytest-gym"}
        if self.platform == "github":
            headers.update({"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"})
        value = f"Bearer {self.token}" if self.token_header == "Authorization" else self.token
        headers[self.token_header] = value
        return headers


def _api(value: str, source: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        raise PostError(f"{source} {value[:100]!r} is not an http(s) API URL")
    return value.rstrip("/")


def _token(env: Mapping[str, str], name: str, how: str) -> str:
    token = env.get(name, "")
    if not token.strip():
        raise PostError(f"${name} is not set: {how}")
    add_secret(token)
    return token


def _number(value: Any) -> int | None:
    return value if is_int(value) and value > 0 else None


def _github_pr(env: Mapping[str, str]) -> int | None:
    """The pull request of the Actions event (pull_request, pull_request_target, an issue comment on a pull
    request), else of ``GITHUB_REF``."""
    path = env.get("GITHUB_EVENT_PATH")
    event: Any = None
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                event = json.loads(handle.read(MAX_BODY))
        except (OSError, ValueError):
            event = None
    if isinstance(event, dict):
        pull = event.get("pull_request")
        if isinstance(pull, dict) and _number(pull.get("number")):
            return _number(pull.get("number"))
        issue = event.get("issue")
        if isinstance(issue, dict) and issue.get("pull_request") and _number(issue.get("number")):
            return _number(issue.get("number"))
    found = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", env.get("GITHUB_REF", ""))
    return int(found.group(1)) if found else None


def github_target(
    env: Mapping[str, str] | None = None,
    *,
    repo: str | None = None,
    pr: int | None = None,
    api: str | None = None,
    token_var: str | None = None,
) -> Target:
    env = os.environ if env is None else env
    repo = repo or env.get("GITHUB_REPOSITORY")
    if not repo or not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise PostError("no repository: run in GitHub Actions ($GITHUB_REPOSITORY) or give --repo OWNER/NAME")
    number = pr if pr is not None else _github_pr(env)
    if number is None:
        raise PostError(
            "not a pull request: no number in $GITHUB_EVENT_PATH or $GITHUB_REF (run on pull_request events, "
            "or give --pr N)"
        )
    base = _api(api or env.get("GITHUB_API_URL") or "https://api.github.com", "--api-url/$GITHUB_API_URL")
    name = token_var or "GITHUB_TOKEN"
    token = _token(env, name, "pass it to the step (env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }})")
    return Target(
        platform="github",
        api=base,
        comments_url=f"{base}/repos/{repo}/issues/{number}/comments",
        comment_url=f"{base}/repos/{repo}/issues/comments/{{id}}",
        where=f"pull request {repo}#{number}",
        token=token,
    )


def gitlab_target(
    env: Mapping[str, str] | None = None,
    *,
    project: str | None = None,
    mr: int | None = None,
    api: str | None = None,
    token_var: str | None = None,
) -> Target:
    env = os.environ if env is None else env
    project = project or env.get("CI_PROJECT_ID")
    if not project:
        raise PostError("no project: run in GitLab CI ($CI_PROJECT_ID) or give --project ID")
    given = env.get("CI_MERGE_REQUEST_IID", "")
    iid = mr if mr is not None else int(given) if given.isdigit() else None
    if iid is None:
        raise PostError(
            "not a merge request pipeline: $CI_MERGE_REQUEST_IID is not set (run in merge request pipelines, or "
            "give --mr IID)"
        )
    base = _api(api or env.get("CI_API_V4_URL") or "", "--api-url/$CI_API_V4_URL")
    if token_var:
        token, header = _token(env, token_var, "set the variable in the CI settings (masked)"), "PRIVATE-TOKEN"
    else:
        token, header = _token(env, "CI_JOB_TOKEN", "or name a token variable with --token-var"), "JOB-TOKEN"
    url = f"{base}/projects/{quote(str(project), safe='')}/merge_requests/{iid}/notes"
    return Target(
        platform="gitlab",
        api=base,
        comments_url=url,
        comment_url=url + "/{id}",
        where=f"merge request !{iid} of project {project}",
        token=token,
        token_header=header,
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is raised as an HTTPError: the token never follows a redirect


_HOW = {
    401: "the token is missing, expired or not accepted",
    403: "the token may not write comments here (GitHub: give the job `permissions: pull-requests: write`; a pull "
    "request from a fork gets a read-only token. GitLab: a job token cannot write notes on most instances: "
    "give a project access token with --token-var)",
    404: "no such pull request or project, or the token cannot see it",
}


def _safe(text: str, token: str) -> str:
    return clean_text(text.replace(token, "***") if token else text, MAX_MESSAGE)


class _Client:
    def __init__(self, target: Target, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self.opener = urllib.request.build_opener(_NoRedirect())

    def call(self, method: str, url: str, body: Mapping[str, Any] | None = None) -> tuple[Any, Mapping[str, str]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers=self.target.headers())
        name = "GitHub" if self.target.platform == "github" else "GitLab"
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                raw = response.read(MAX_BODY + 1)
                headers = {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as exc:
            detail = ""
            try:
                message = json.loads(exc.read(64 * 1024) or b"{}")
                found = message.get("message") if isinstance(message, dict) else None
                detail = f": {str(found)[:300]}" if found else ""
            except (OSError, ValueError):
                pass
            how = f"; {_HOW[exc.code]}" if exc.code in _HOW else ""
            said = f"{name} answered {exc.code} {exc.reason} to {method} {url}{detail}{how}"
            raise PostError(_safe(said, self.target.token)) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise PostError(_safe(f"cannot reach {name} at {self.target.api}: {reason}", self.target.token)) from None
        if len(raw) > MAX_BODY:
            raise PostError(f"{name}'s answer to {method} {url} is larger than {MAX_BODY} bytes")
        try:
            return (json.loads(raw) if raw.strip() else None), headers
        except ValueError:
            raise PostError(f"{name} answered {method} {url} with something that is not JSON") from None


def _comment_id(items: Any, marker: str) -> int | None:
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("body"), str) and marker in item["body"]:
            found = item.get("id")
            if is_int(found):
                return found
    return None


def find_comment(client: _Client, marker: str) -> int | None:
    """The id of the comment holding ``marker``, page by page."""
    target = client.target
    for page in range(1, MAX_PAGES + 1):
        sep = "&" if "?" in target.comments_url else "?"
        extra = "&sort=asc&order_by=created_at" if target.platform == "gitlab" else ""
        items, headers = client.call("GET", f"{target.comments_url}{sep}per_page={PER_PAGE}&page={page}{extra}")
        found = _comment_id(items, marker)
        if found is not None:
            return found
        if not isinstance(items, list) or len(items) < PER_PAGE:
            return None
        if target.platform == "gitlab" and "x-next-page" in headers and not headers["x-next-page"].strip():
            return None
        if target.platform == "github" and "link" in headers and 'rel="next"' not in headers["link"]:
            return None
    return None


@dataclass(frozen=True)
class Posted:
    action: Literal["created", "updated"]
    url: str | None
    where: str


def post_comment(target: Target, body: str, marker: str, timeout: float = TIMEOUT_S) -> Posted:
    """Create the comment, or update the one holding ``marker``; ``PostError`` when that fails."""
    if marker not in body:
        raise PostError("the comment has no marker to find it again")
    client = _Client(target, timeout)
    existing = find_comment(client, marker)
    if existing is None:
        answer, _ = client.call("POST", target.comments_url, {"body": body})
        action: Literal["created", "updated"] = "created"
    else:
        method = "PATCH" if target.platform == "github" else "PUT"
        answer, _ = client.call(method, target.comment_url.format(id=existing), {"body": body})
        action = "updated"
    url = answer.get("html_url") if isinstance(answer, dict) else None
    return Posted(action, url if isinstance(url, str) else None, target.where)
