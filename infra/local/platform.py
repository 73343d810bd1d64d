"""The local stage's platform account: the operator's credentials on the local stack.

Kept apart from `infra.local.stack` so that the CLI can point at a running local stack without importing
moto and werkzeug (which the stack module loads)."""

PLATFORM_ACCESS_KEY = "AKIAMOONSENDPLATFORM"
PLATFORM_SECRET_KEY = "moonsend-local-platform-secret"
