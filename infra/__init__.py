"""What Chalice does not create: resource provisioning, the local stack, and the moonsend CLI."""
