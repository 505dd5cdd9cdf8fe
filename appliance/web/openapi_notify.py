"""The notification routes for the OpenAPI document (D15, issue 24): a grant's notices and a
person's notification settings."""

from __future__ import annotations

from grantd.web.openapi_model import BEARER, BOOL, INT, MS, PERSON, STRING, Ok, Op, Schema, array, obj, ref

GRANT_ID = "/api/grants/{grant_id}"

NOTIFY_SCHEMAS: dict[str, Schema] = {
    "Notice": obj(
        {
            "channel": STRING,
            "recipient": STRING,
            "kind": {"type": "string", "enum": ["review_requested", "escalated", "resolved", "digest"]},
            "level": INT,
            "status": {"type": "string", "enum": ["pending", "sent", "failed", "held", "digested"]},
            "attempts": INT,
            "at": MS,
            "created_at": MS,
            "error": STRING,
        },
        ("channel", "recipient", "kind", "level", "status", "attempts", "at", "created_at"),
    ),
    "NotificationSettings": obj(
        {
            "channels": {
                "type": "object",
                "additionalProperties": {"oneOf": [BOOL, obj({"topic": STRING})]},
            },
            "available": array(obj({"id": STRING, "type": STRING}, ("id", "type"))),
        },
        ("channels", "available"),
    ),
    "NotificationSettingsBody": obj(
        {
            "channels": {
                "type": "object",
                "description": "channel id -> true, false (opt out) or {topic} (the person's ntfy topic)",
                "additionalProperties": {"oneOf": [BOOL, obj({"topic": STRING})]},
            }
        },
        ("channels",),
    ),
}

NOTIFY_OPERATIONS: tuple[Op, ...] = (
    Op(
        "GET",
        GRANT_ID + "/notifications",
        "notify.grant_notifications",
        "Who was told about a grant, on which channel, when, and the outcome (D15)",
        BEARER,
        ok={200: Ok(obj({"data": array(ref("Notice"))}, ("data",)))},
        tag="notifications",
    ),
    Op(
        "GET",
        "/api/account/notifications",
        "notify.notification_settings",
        "The signed-in person's notification settings and the configured channels",
        PERSON,
        ok={200: Ok(ref("NotificationSettings"))},
        tag="notifications",
    ),
    Op(
        "PUT",
        "/api/account/notifications",
        "notify.set_notification_settings",
        "Replace the signed-in person's notification settings (opt out of a channel, name an ntfy topic)",
        PERSON,
        "NotificationSettingsBody",
        ok={200: Ok(ref("NotificationSettings"))},
        tag="notifications",
    ),
)
