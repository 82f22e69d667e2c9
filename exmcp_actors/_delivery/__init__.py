"""Where messages wait on their way to a subscriber, with no thread of its own: a handle's
inbox, its ``max_pending`` bound, and the delivery targets (an inbox, an actor, a ``put()``
object) with the part of a handle that delivery reads."""
