"""The exceptions Weir raises.

Every error is a :class:`WeirError`; catch that to handle any failure of Weir.

.. code-block:: text

    WeirError
    ├── InvalidArgumentError (also a ValueError)
    ├── StateError
    ├── StateBackendError
    │   └── StateLostError
    └── CheckpointError
        └── SavepointFormatError

Examples:
    >>> import weir
    >>> from weir.exceptions import InvalidArgumentError, WeirError
    >>> try:
    ...     weir.key_group_range(128, 0, 0)
    ... except WeirError as err:
    ...     print(type(err).__name__, isinstance(err, ValueError))
    InvalidArgumentError True
"""

from __future__ import annotations

from weir._internal import (
    CheckpointError,
    InvalidArgumentError,
    SavepointFormatError,
    StateBackendError,
    StateError,
    StateLostError,
    WeirError,
)

__all__ = [
    "CheckpointError",
    "InvalidArgumentError",
    "SavepointFormatError",
    "StateBackendError",
    "StateError",
    "StateLostError",
    "WeirError",
]
