"""What runs only in the driver and the TaskRunner: the V1-trainer mixin, start-up validation, the
``gtpo/*`` diagnostics, the generation watchdog, the validation metrics, the per-step audit dump and
the operational ``gtpo.*`` settings. Workers never import it."""
