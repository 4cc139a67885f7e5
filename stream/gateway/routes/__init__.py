"""The gateway's routes (docs/api.md), one router per resource, each route a
named function: ``jobs`` (start, list, read, decisions, journal), ``events``,
``messages`` (the web channel's conversation), ``answers`` (a flow's open
questions and approvals), ``files`` (file channels' uploads), ``inbound``
(email by webhook), ``playbooks``, ``streams`` (a job's server-sent events),
``schedules``, ``dev`` (the mail catcher of ``lemongraph dev``) and
``health``. What they share is in ``shared`` (the
:class:`~stream.gateway.routes.shared.Gateway` and its dependency, paging);
``capabilities`` says what each token source may do. ``build_api`` in
stream/gateway/api.py composes the routers.
"""
