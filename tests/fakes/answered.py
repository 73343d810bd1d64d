"""A domain call answered as the API answers it (chalicelib.api.answers.answer_of): its status and body, a
refusal's status and members included. For the tests of the services that the edge calls."""

from chalicelib.api.answers import DomainAnswer as Answered
from chalicelib.api.answers import answer_of as answered

__all__ = ["Answered", "answered"]
