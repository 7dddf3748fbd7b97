"""Typed errors at the provisioner's boundaries."""


class ProvisionerError(ValueError):
    """Bad input or an impossible request; the message is one line naming the field and fix.

    params : the Python parameters the message names (the CLI prints its flags instead).
    """

    def __init__(self, message: str, *, params: tuple[str, ...] = ()):
        super().__init__(message)
        self.params = tuple(params)
