"""The HTTP edge: every route of the stage's API, by resource, as Chalice blueprints that app.py registers.

A request meets, in order: API Gateway (its own refusals are problem details too: infra/gateway_responses.py),
Chalice (a method or media type a route does not take: `answers.chalice_problems`, its middleware), the
seam that finds the caller and checks its role (`edge.Route`, `edge.blueprint`), then the route's one call into the
domain, which takes the tenant's id and returns a body or raises a refusal (chalicelib.core.errors).
`answers` is the one place an answer is shaped: problems, ETags, caching.
"""
