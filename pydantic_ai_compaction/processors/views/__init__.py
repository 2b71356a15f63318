"""Views: each projects the request sent to the model without touching the persisted history."""
