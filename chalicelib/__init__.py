"""moonsend's domain: everything the Lambda functions do, one module per concept."""
