"""Liquid rendering of campaign subjects and bodies, compiled once per campaign.

python-liquid 2 does not cache templates, and parsing is most of the cost (about 5x a render), so
each container keeps a bounded cache of compiled campaigns keyed on campaign id and a hash of the
templates. Tenant templates are untrusted: resource limits make a hostile one fail fast.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from io import StringIO
from typing import Any

from liquid import BoundTemplate, Environment, StrictUndefined, Template, Undefined
from liquid.exceptions import LiquidError, OutputStreamLimitError
from liquid.output import LimitedStringIO

from chalicelib.errors import RenderFailed, TemplateInvalid

CACHE_SIZE = 256


class _CharLimitedIO(LimitedStringIO):
    """The output limit counted in characters rather than UTF-8 bytes.

    python-liquid encodes every write to count its bytes, about 15% of a render; characters bound the
    output just as well (a character is at most four bytes), without the encoding.
    """

    def write(self, s: str) -> int:
        if s:
            self.size += len(s)
            if self.size > self.limit:
                raise OutputStreamLimitError("output stream limit reached", token=None)
        return StringIO.write(self, s)


class _LimitedTemplate(BoundTemplate):
    def _get_buffer(self) -> StringIO:
        limit = self.env.output_stream_limit
        return StringIO() if limit is None else _CharLimitedIO(limit=limit)


class _Limited(Environment):
    """An environment whose limits bound what one render of a tenant template may cost."""

    template_class = _LimitedTemplate

    loop_iteration_limit = 100_000
    output_stream_limit = 2 * 1024 * 1024
    context_depth_limit = 30
    local_namespace_limit = 64 * 1024


_ENVS: dict[tuple[bool, bool], Environment] = {}


def _env(*, strict: bool, autoescape: bool) -> Environment:
    key = (strict, autoescape)
    env = _ENVS.get(key)
    if env is None:
        env = _Limited(undefined=StrictUndefined if strict else Undefined, autoescape=autoescape)
        _ENVS[key] = env
    return env


@dataclass(frozen=True)
class Rendered:
    subject: str
    body: str


class CompiledCampaign:
    """A campaign's subject and body, parsed once and rendered per recipient."""

    def __init__(self, campaign_id: str, subject: str, body: str, *, strict: bool) -> None:
        self.campaign_id = campaign_id
        # The subject is plain text: escaping it would put &amp; in the inbox.
        self._subject = _parse(subject, "subject", strict=strict, autoescape=False)
        # Recipient metadata often comes from sign-up forms: HTML-escape it in the body.
        self._body = _parse(body, "body", strict=strict, autoescape=True)

    def render(self, variables: Mapping[str, Any]) -> Rendered:
        subject = _render(self._subject, "subject", variables)
        body = _render(self._body, "body", variables)
        # A subject is one header line: a line break there would be header injection.
        return Rendered(subject=" ".join(subject.split()), body=body)


def _render(template: Template, name: str, variables: Mapping[str, Any]) -> str:
    try:
        return template.render(**variables)
    except LiquidError as exc:
        raise RenderFailed(_describe(exc, name)) from exc
    except RecursionError as exc:
        raise RenderFailed(f"{name}: template nested too deeply") from exc


def _parse(source: str, name: str, *, strict: bool, autoescape: bool) -> Template:
    try:
        return _env(strict=strict, autoescape=autoescape).from_string(source, name=name)
    except LiquidError as exc:
        raise TemplateInvalid(_describe(exc, name)) from exc


def _describe(exc: LiquidError, name: str | None = None) -> str:
    """`body, line 3, column 7: unexpected ...`: where the problem is, and what it is.

    python-liquid gives no position for some errors at the end of a tag; those name the template only.
    """
    where = []
    if exc.template_name or name:
        where.append(str(exc.template_name or name))
    ctx = exc.context()
    if ctx is not None:
        where.append(f"line {ctx[0]}, column {ctx[1]}")
    message = str(exc.message if exc.message is not None else type(exc).__name__)
    return f"{', '.join(where)}: {message}" if where else message


class TemplateCache:
    """A bounded, thread-safe LRU of compiled campaigns."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, str, bool], CompiledCampaign] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, campaign_id: str, subject: str, body: str, *, strict: bool) -> CompiledCampaign:
        digest = hashlib.sha256(f"{len(subject)}:{subject}{body}".encode()).hexdigest()
        key = (campaign_id, digest, strict)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        compiled = CompiledCampaign(campaign_id, subject, body, strict=strict)
        with self._lock:
            self._items[key] = compiled
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return compiled

    def __len__(self) -> int:
        return len(self._items)


def template_variables(
    email: str, metadata: Mapping[str, Any], campaign_id: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Metadata at top level (`{{ name }}`, as MoonMail templates use it), plus fixed names.

    The fixed names win over metadata of the same name, so a recipient cannot override them.
    """
    variables = dict(metadata)
    variables["recipient"] = {"email": email, **{k: v for k, v in metadata.items()}}
    variables["recipient"]["email"] = email
    variables["campaign"] = {"id": campaign_id}
    if extra:
        variables.update(extra)
    return variables
