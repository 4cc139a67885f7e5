"""The gateway's read models (docs/api.md): what the gateway knows of jobs
(:mod:`.jobs`, with :mod:`.entries`, :mod:`.interrupts`, :mod:`.run_verdicts`
and :mod:`.reply_lookup`) and of schedules (:mod:`.schedules`), each fed from
its topics by the one follow loop (:mod:`.follow`)."""
