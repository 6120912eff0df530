"""`SessionTable`: the broker's sessions by client id (`Broker.states`), with the ids in order,
and each user's ids in order.

A dict as before for every lookup (`get`, `in`, `values()` at dict speed); setting and deleting a
session also keep two sorted indexes (sortedkeys.py), so that the API lists a page from a cursor
instead of sorting or scanning the whole table for each page:

- `ids`: every client id;
- the sessions of each user (`user_ids`, for `clients?user=` and `sessions?user=`): one index of
  `<user name> U+0000 <client id>` keys, in which one user's sessions are one run. Neither part
  can hold U+0000 (MQTT strings refuse it), so the run is exactly that user's. One index for
  every user, not one per user: a fleet of one user per device costs one string per session.
  Sessions without a user name are not in it.

A session's user name changes in place when its client logs in again as another user and
resumes it (`broker.takeover = any`): the broker does that through `set_username`, which keeps
the index right.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from bridge.brokers.embedded.compact import shrink_if_sparse
from bridge.brokers.embedded.sortedkeys import SortedKeys

if TYPE_CHECKING:
    from bridge.brokers.embedded.sessions import SessionState

_SEPARATOR = "\x00"  # between user name and client id in `_by_user`: in neither of them


def _user_key(username: str, clientid: str) -> str:
    return username + _SEPARATOR + clientid


class SessionTable(dict[str, "SessionState"]):
    __slots__ = ("_by_user", "ids")

    def __init__(self) -> None:
        super().__init__()
        self.ids = SortedKeys()
        self._by_user = SortedKeys()

    def __setitem__(self, clientid: str, state: SessionState) -> None:
        replaced = dict.get(self, clientid)
        if replaced is not None and replaced.username is not None:
            self._by_user.discard(_user_key(replaced.username, clientid))
        super().__setitem__(clientid, state)
        self.ids.add(clientid)
        if state.username is not None:
            self._by_user.add(_user_key(state.username, clientid))

    def __delitem__(self, clientid: str) -> None:
        state = dict.__getitem__(self, clientid)
        super().__delitem__(clientid)
        self._forget(clientid, state)

    def pop(self, clientid: str, *default: Any) -> Any:
        state = dict.get(self, clientid)
        found = super().pop(clientid, *default)
        if state is not None:
            self._forget(clientid, state)
        return found

    def _forget(self, clientid: str, state: SessionState) -> None:
        self.ids.discard(clientid)
        if state.username is not None:
            self._by_user.discard(_user_key(state.username, clientid))
        shrink_if_sparse(self)  # a fleet gone leaves no fleet-sized table behind

    def set_username(self, state: SessionState, username: str | None) -> None:
        """`state` is now `username`'s (a resumed session's new login); the index follows."""
        if dict.get(self, state.clientid) is state and state.username != username:
            if state.username is not None:
                self._by_user.discard(_user_key(state.username, state.clientid))
            if username is not None:
                self._by_user.add(_user_key(username, state.clientid))
        state.username = username

    def user_ids(self, username: str, after: str | None, *, inclusive: bool = False) -> Iterator[str]:
        """The client ids of `username`'s sessions after `after` (and `after` itself when
        `inclusive`; all of them for None), in order. Like `SortedKeys.after`, a generator over the
        live index: read it within one loop turn."""
        head = username + _SEPARATOR
        start, from_start = (head, True) if after is None else (head + after, inclusive)
        for key in self._by_user.after(start, inclusive=from_start):
            if not key.startswith(head):
                return  # past this user's run
            yield key[len(head) :]

    # The other ways to change a dict would leave the indexes behind: the broker does not use them.
    def _unsupported(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError("SessionTable changes only by [] =, del and pop")

    setdefault = update = popitem = clear = __ior__ = _unsupported
