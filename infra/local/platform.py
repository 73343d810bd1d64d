"""Emulator: the local stage's platform account: the operator's credentials on the local stack.

Kept apart from `infra.local.stack` so that the CLI can point at a running local stack without importing
moto and werkzeug (which the stack module loads)."""

PLATFORM_ACCESS_KEY = "AKIAMOONSENDPLATFORM"
PLATFORM_SECRET_KEY = "moonsend-local-platform-secret"

# Settings the local stack gives every function (and the operator's commands on the local stage), which no
# deployed stage's template sets: webhooks to a receiver on this machine, for the tests and the demo.
LOCAL_STAGE_SETTINGS = {"MOONSEND_WEBHOOK_ALLOW_LOOPBACK": "true"}
