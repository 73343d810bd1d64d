"""The local stack: moto's server on loopback plus a runtime for what moto does not do."""
