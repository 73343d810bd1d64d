"""A domain call answered as the API answers it (chalicelib.api.answers.outcome): its status and body, a
refusal's status and members included. For the tests of the services that the edge calls."""

from chalicelib.api.answers import Outcome as Answered
from chalicelib.api.answers import outcome as answered

__all__ = ["Answered", "answered"]
