"""Liquid rendering of campaign subjects and bodies, compiled once per campaign.

python-liquid 2 does not cache templates, and parsing is most of the cost (about 5x a render), so
each container keeps a bounded cache of compiled campaigns keyed on campaign id and a hash of the
templates. Tenant templates are untrusted: resource limits make a hostile one fail fast.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from io import StringIO
from typing import Any, NamedTuple, TextIO

from liquid import BoundTemplate, Environment, RenderContext, StrictUndefined, Undefined
from liquid.ast import BlockNode, Node
from liquid.builtin.tags.for_tag import ForNode
from liquid.builtin.tags.tablerow_tag import TablerowNode
from liquid.exceptions import LiquidError, LoopIterationLimitError, OutputStreamLimitError

from chalicelib.core.errors import RenderFailed, TemplateInvalid

CACHE_SIZE = 256
OUTPUT_LIMIT_CHARS = 2 * 1024 * 1024  # one rendered subject or body
# C0 controls but the white space that str.split() folds away, DEL and C1 controls.
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x9f]")
MAX_SEQUENCE_ITEMS = 100_000  # the most items a filter may be asked to walk or build

# Filters whose output can be far larger than their input; they are checked before they run.
_MULTIPLYING = ("replace", "join")


def _limit_error(what: str) -> OutputStreamLimitError:
    return OutputStreamLimitError(f"{what} (the limit is {OUTPUT_LIMIT_CHARS:,} characters)", token=None)


class _OutputBoundedBlock(BlockNode):
    """A loop body that checks the output written so far after each iteration.

    A loop is the only way a template's output grows beyond its own size times its largest value, so a
    check per iteration bounds the output as well as python-liquid's per-write limit does, at a
    fraction of its cost: that limit wraps every write (several per recipient and line) in Python,
    which cost about 15% of a render.
    """

    __slots__ = ()

    def render_to_output(self, context: RenderContext, buffer: TextIO) -> int:
        n = BlockNode.render_to_output(self, context, buffer)
        if buffer.tell() > OUTPUT_LIMIT_CHARS:
            raise _limit_error("output too large")
        return n


def _bound_loops(template: BoundTemplate) -> None:
    """Swap each loop's body for one that checks the output size per iteration."""
    static = RenderContext(template)
    pending: list[Node] = list(template.nodes)
    while pending:
        node = pending.pop()
        if isinstance(node, ForNode | TablerowNode) and not isinstance(node.block, _OutputBoundedBlock):
            node.block = _OutputBoundedBlock(node.block.token, node.block.nodes)
        pending.extend(node.children(static, include_partials=False))


def _size_of(value: object) -> int:
    return len(value) if isinstance(value, str | list | tuple | range | dict) else 0


def _guarded(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` with a check of what it is about to build, before it builds it.

    Without it `{{ (1..1000000000) | sum }}` runs for minutes and `{{ a | replace: "a", a }}` on a
    64 KiB string asks for 4 GiB: python-liquid's output limit only sees the result once it exists.
    """

    @functools.wraps(func)
    def guard(left: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(left, range | list | tuple | dict) and len(left) > MAX_SEQUENCE_ITEMS:
            raise LoopIterationLimitError(f"{name}: more than {MAX_SEQUENCE_ITEMS:,} items", token=None)
        if name == "replace" and args:
            # An array or a hash on the left is replaced in as its text (python-liquid's str()): bounded alike.
            text = left if isinstance(left, str) else "" if left is None else str(left)
            old, new = str(args[0]), str(args[1]) if len(args) > 1 else ""
            grows = (text.count(old) if old else len(text) + 1) * max(0, len(new) - len(old))
            if len(text) + grows > OUTPUT_LIMIT_CHARS:
                raise _limit_error("replace: result too large")
        elif name == "join" and isinstance(left, range | list | tuple):
            separator = args[0] if args else kwargs.get("separator", " ")
            if len(left) * len(str(separator)) > OUTPUT_LIMIT_CHARS:
                raise _limit_error("join: result too large")
        return func(left, *args, **kwargs)

    return guard


class _Limited(Environment):
    """An environment whose limits bound what one render of a tenant template may cost."""

    loop_iteration_limit = 100_000
    context_depth_limit = 30
    local_namespace_limit = 64 * 1024
    # python-liquid's own output limit stays off: loops check it per iteration (_OutputBoundedBlock)
    # and `_render` checks the result.

    def setup_tags_and_filters(self, *, extra: bool = False) -> None:
        super().setup_tags_and_filters(extra=extra)
        for name, func in list(self.filters.items()):
            if name in _MULTIPLYING or getattr(func, "__module__", "") == "liquid.builtin.filters.array":
                self.filters[name] = _guarded(name, func)


_ENVS: dict[tuple[bool, bool], Environment] = {}


def _env(*, strict: bool, autoescape: bool) -> Environment:
    key = (strict, autoescape)
    env = _ENVS.get(key)
    if env is None:
        env = _Limited(undefined=StrictUndefined if strict else Undefined, autoescape=autoescape)
        _ENVS[key] = env
    return env


class Rendered(NamedTuple):
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
        # A subject is one header line: a line break there would be header injection, and other control
        # characters (NUL, ESC, DEL) have no place in a header (RFC 5322): they are dropped.
        if not subject.isprintable():
            subject = _CONTROLS.sub("", subject)
        return Rendered(subject=" ".join(subject.split()), body=body)


def _render(template: BoundTemplate, name: str, variables: Mapping[str, Any]) -> str:
    buffer = StringIO()
    try:
        # What BoundTemplate.render does, without its two copies of the variables: they are built
        # fresh for each recipient and only read. Our environments have no output stream limit (see
        # _Limited), so a plain StringIO is what render would use.
        context = template.context_class(template, globals=template.make_globals(variables))
        template.render_with_context(context, buffer)
        out = buffer.getvalue()
    except LiquidError as exc:
        raise RenderFailed(_describe(exc, name)) from exc
    except RecursionError as exc:
        raise RenderFailed(f"{name}: template or data nested too deeply") from exc
    except MemoryError:  # the container's trouble, not the recipient's: Lambda retries the event
        raise
    except Exception as exc:  # a filter raising on data (ceil of 1e999, sum of "n/a"): that recipient's error
        raise RenderFailed(f"{name}: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if len(out) > OUTPUT_LIMIT_CHARS:
        raise RenderFailed(_describe(_limit_error("output too large"), name))
    return out


def _parse(source: str, name: str, *, strict: bool, autoescape: bool) -> BoundTemplate:
    if not source.isascii():
        try:
            source.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TemplateInvalid(f"{name}: not valid Unicode (a lone UTF-16 surrogate at {exc.start})") from exc
    try:
        template = _env(strict=strict, autoescape=autoescape).from_string(source, name=name)
    except LiquidError as exc:
        raise TemplateInvalid(_describe(exc, name)) from exc
    _bound_loops(template)
    return template


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
        digest = hashlib.sha256(f"{len(subject)}:{subject}{body}".encode("utf-8", "surrogatepass")).hexdigest()
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
    variables["recipient"] = {**metadata, "email": email}
    variables["campaign"] = {"id": campaign_id}
    if extra:
        variables.update(extra)
    return variables
