"""Typed errors at the provisioner's boundaries."""


class ProvisionerError(ValueError):
    """Bad input or an impossible request; the message is one line naming the field and fix."""


class NoFeasibleDesignError(ProvisionerError):
    """Nothing in the search space meets every SLO (or budget); says which one binds."""

    def __init__(self, message: str, binding: str = ""):
        super().__init__(message)
        self.binding = binding
