"""precompile_email: a recipient event validated, rendered (Liquid), tracked and queued."""
