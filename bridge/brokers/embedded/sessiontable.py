"""`SessionTable`: the broker's sessions by client id (`Broker.states`), with the ids in order.

A dict as before for every lookup (`get`, `in`, `values()` at dict speed); setting and deleting a
session also keep `ids` (sortedkeys.py), so that the API lists sessions, clients and subscriptions
a page at a time from a cursor instead of sorting the whole table for each page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from bridge.brokers.embedded.compact import shrink_if_sparse
from bridge.brokers.embedded.sortedkeys import SortedKeys

if TYPE_CHECKING:
    from bridge.brokers.embedded.sessions import SessionState


class SessionTable(dict[str, "SessionState"]):
    __slots__ = ("ids",)

    def __init__(self) -> None:
        super().__init__()
        self.ids = SortedKeys()

    def __setitem__(self, clientid: str, state: SessionState) -> None:
        super().__setitem__(clientid, state)
        self.ids.add(clientid)

    def __delitem__(self, clientid: str) -> None:
        super().__delitem__(clientid)
        self.ids.discard(clientid)
        shrink_if_sparse(self)  # a fleet gone leaves no fleet-sized table behind

    def pop(self, clientid: str, *default: Any) -> Any:
        found = super().pop(clientid, *default)
        self.ids.discard(clientid)
        shrink_if_sparse(self)
        return found

    # The other ways to change a dict would leave `ids` behind: the broker does not use them.
    def _unsupported(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError("SessionTable changes only by [] =, del and pop")

    setdefault = update = popitem = clear = __ior__ = _unsupported
