"""The process model: which thread may touch what, and in which order it takes locks.

This docstring is the one statement of the rule; every other mention points here.

Threads and actors of one client
--------------------------------
- **host threads**: the application's own, calling the ``Client`` facade (``_api``).
- **the client actor** (``_client_actor``): the mailbox for inputs nobody waits for.
- **a reader thread** per open connection (``_transport``): turns bytes into frames.
- **the refcount worker** (``_refcount_worker``): releases and resubscriptions; its thread
  starts with its first work (``_lazy_worker``), so most clients never have one.
- **a subscriber proxy** per actor or ``put()`` subscriber (``_subscriber_proxy``): ordered
  delivery to it; its stop hook reports the subscriber's end. A thread subscriber has the
  stop hook alone (``InboxStopHook``), with no thread: its messages land in its inboxes.
- **short-lived threads**: a connector per open attempt, a resync per modern resync.
- **the live picture's workers** (``_api``): a catalog's worker (its refetches, and its
  ``put()`` subscriber's ``put()``), a resource feed's worker per watched URI (the one
  ``resources/read`` in flight, offered to every watch of the URI), a courier per resource
  watch with a ``put()`` subscriber (its ``put()``). Each is adopted
  (``SharedState.adopt``), so ``disconnect()`` returns once they ended.
- **host pools** (``_host_pool``): run the host's handlers and progress callbacks.
- **the scheduler** (``_util/_scheduler``, one per process): timers and liveness polls, and
  only while one is armed: a settled connection disarms its stage timers, and a subscriber
  thread that registered itself is told of by its end (``_util/_thread_end``), not polled.

Who owns what
-------------
=============================  =====================================================
state                          who may read or write it
=============================  =====================================================
the Session (every protocol    any thread, only while it holds the **session
state: phase, pending          monitor** (``_monitor.SessionMonitor``), and only
requests, entries, slots,      through session code and the effects of
subscriptions, the index,      ``_effects.PERFORMERS``
the kept list pages)
the tool book's ``facts``      replaced whole under the monitor (``LearnTools``);
                               read without a lock by the transport's workers
                               (``Mcp-Param-*`` headers) and host threads (may a
                               dropped call be re-issued), through ``SharedState.tools``
the listener index             written under the monitor *and* the lane's lock;
                               read by a reader under the lane's lock alone (its
                               memory of what each updated URI reached is written
                               by whoever reads: the index cannot change meanwhile)
``SharedState``                written under the monitor (``Shell.publish``), each
                               field replaced whole; read by the facade without a lock
the refcount book              under ``SharedBook.lock``; wire operations on it in
                               ``SharedBook.serial`` (the client's wire turn)
the seen elicitation ids       ``SeenElicitations``, one per client (the host runtime's, in
                               the session's config): noted by the session and by host
                               threads (a -32042's elicitations), taken by the session,
                               each under its own leaf lock
a handle's inbox and bound     queued by whoever delivers (under the monitor or the
                               lane's lock), read by the host; cut levels only rise
the transport                  ``send``/``cancel_stream``/``auth_context`` by a monitor holder;
                               ``open``/``close`` by a connector or the shutdown,
                               under ``Shell.transport_lock``; ``abort_open`` by
                               the shutdown, without it (it wakes the open that
                               holds it)
=============================  =====================================================

How a thread feeds the session
------------------------------
Every thread does it the same way: take the monitor, run one input, perform what it
produced, let go (``SessionMonitor.run``/``turn``). A host thread runs its own commands
(requests, cancellations, roots, log level, registrations and removals, listens); the
client actor runs what reaches its mailbox; a reader runs only the answer to a host's
request, and only if the monitor is free at that instant (``try_answer``): everything else a
reader cannot deliver itself goes to the actor. The effects performed under the monitor are
short and never block (queue a frame, arm a timer, start a thread or an actor, tell an actor);
those listed in ``_protocol._events.PERFORMED_AFTER_THE_LOCK`` (completing a host's future)
are performed after it is let go.

Order
-----
A host thread's command has put its frames on the transport before it returns, and each
transport sends in the order it is given: **what one thread asks for reaches the wire in the
order it asked**. That includes the ``resources/subscribe`` and ``resources/unsubscribe`` of
its registrations, removals and failed registrations' rollbacks: they are sent on that
thread, in the wire turn (``_api._wire_turn``); a removal that cannot get the turn within its
timeout raises ``RequestTimeout`` and leaves its unsubscribes to the refcount worker, and a
failed registration's cleanup falls back to the worker (its unsubscribes) and to the client
actor (its ``AbandonListener``, which sends nothing) only when the turn or the monitor stays
busy past its deadline: the registration raises either way.

A subscriber receives its messages in wire order: the lane delivers on the reader only while
nothing of the same connection waits for the actor.

No host code under a lock
-------------------------
``put()``, ``tell()`` to the host's actors, handlers, progress callbacks and future
callbacks never run under a lock of the library: ``put()`` and ``tell()`` run on the
subscriber's proxy, handlers and callbacks on the host pools, and futures are completed after
the monitor is let go (a reader completes them after it lets go of the lane's lock too). A
catalog's ``put()`` runs on its worker and a resource watch's on its courier, with no lock
held; a resource feed offers its watches their messages under its lock, which only queues
(an inbox, a courier's box, or a ``tell()`` to an actor subscriber: pykka's ``tell`` only
puts in the actor's mailbox). A
delivery that finds a proxy stopped starts its successor (``Shell.replace_proxy``) rather
than calling ``put()`` itself. So host code may call back into the client from anywhere; a
``disconnect()`` from a ``put()`` waits neither for its own proxy thread nor for another that
is in ``disconnect()`` too (``SharedState.join_children``).

Lock order
----------
A thread holding a lock may take only those below it, never one above::

    ResourceFeed._open_lock  held by a URI's first watch_resource() across the registration
                             of the watch underneath (so above the wire turn); taken by no
                             other thread, and with no lock held
    a catalog's kind lock    ``Freshness``: held across a walk of its kind (a reader's
                             refetch, refresh(wait=True), the worker's), so above the monitor;
                             a reader only tries it, within the catalog's timeout
    SharedBook.serial        the wire turn (a host thread's, or the refcount worker's): held
                             across a subscribe's or release's wait for its answer, with no
                             other lock of this list held
    session monitor          SessionMonitor.lock (never held while waiting for I/O or a reply)
    delivery lane            DeliveryLane._lock (re-entrant; a reader takes it first and only
                             *tries* the monitor, so the two cannot deadlock)
    leaves                   SharedBook.lock, Shell._proxy_lock, LivenessWatcher._lock,
                             SeenElicitations' (the session and host threads note and take
                             elicitation ids under it, nothing else), the
                             scheduler's, a transport's writer queue, host pool queues and
                             the like: none runs host code or takes a lock above it, and
                             they nest only in this order: Shell._proxy_lock (starting a
                             proxy) > LivenessWatcher._lock > a ThreadEnd's and TimerSlot's
                             > the scheduler's; HostRuntime's early-status lock > a task
                             handle's, a Book's; LazyWorker's (held to start the worker, or to
                             do in place what needs no worker) > SharedBook.lock and pykka's
                             registry; Shell._proxy_lock > an InboxStopHook's (held only to
                             end it once); a ResourceFeed's condition > a LatestInbox's
                             and SharedState.children_lock; a catalog's kind lock >
                             Freshness._state > the scheduler's; the resource watches'
                             registry lock and a TkSubscriber's take nothing. A ThreadEnd
                             runs its callbacks with no lock
                             held (in the ending thread; none at exit nor in a forked
                             child); they take LivenessWatcher._lock

``Shell.transport_lock`` stands apart: a connector holds it while it opens the transport
(blocking I/O) and takes nothing else but ``Shell._opening_lock`` (a leaf, held only to
say it is opening); the shutdown takes it after letting go of the monitor, and first wakes
the open it would wait for (``Shell.abort_open``).
A thread that holds the monitor and asks for it again gets ``_monitor.Reentered`` (a bug of
the library), never a hang; an input raised inside a delivery (a bound's overflow) is run
before the monitor is let go (``SessionMonitor.defer``), or, raised on a reader delivering
without the monitor, by the client actor.
"""
