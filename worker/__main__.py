"""``python -m efold.worker probe|prep --ipc-fd N --key-fd M [--credential-fd K]`` (see ``efold.worker.entry``)."""

from efold.worker.entry import main

raise SystemExit(main())
