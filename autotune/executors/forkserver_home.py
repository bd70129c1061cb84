"""The fork server's own folder (its torch caches), taken back by the fork server itself when it ends.

The tuner that started the server removes the folder at exit; a tuner killed outright (SIGKILL, the
OOM killer) runs no exit handler, and its fork server, which ends once its last client is gone, would
leave the folder in /tmp. The server imports this module first among its preloads (local.PRELOAD): the
folder named in FORKSERVER_HOME_ENV is removed when that process, and no trial forked from it, exits.
Standard library only: it is imported before torch.
"""

from __future__ import annotations

import atexit
import os
import shutil

from .tmpdirs import FORKSERVER_HOME_ENV


def _register() -> None:
    folder = os.environ.get(FORKSERVER_HOME_ENV)
    if not folder or not os.path.basename(folder).startswith("autotune-forkserver-"):
        return
    server = os.getpid()

    def remove() -> None:
        # Trials are forked from the server and inherit this handler: only the server's own exit removes.
        if os.getpid() == server:
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)


_register()
