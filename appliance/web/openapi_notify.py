"""The notification routes for the OpenAPI document (D15, issue 24): a grant's notices and a
person's notification settings."""

from __future__ import annotations

from grantd.web.openapi_model import (
    ANY_OBJECT,
    BEARER,
    BOOL,
    INT,
    MS,
    NONE,
    PERSON,
    STRING,
    Ok,
    Op,
    Schema,
    array,
    obj,
    ref,
)

GRANT_ID = "/api/grants/{grant_id}"

NOTIFY_SCHEMAS: dict[str, Schema] = {
    "Notice": obj(
        {
            "channel": STRING,
            "recipient": STRING,
            "kind": {"type": "string", "enum": ["review_requested", "escalated", "resolved", "digest"]},
            "level": INT,
            "status": {"type": "string", "enum": ["pending", "sent", "failed"]},
            "digest": {
                "type": "string",
                "enum": ["held", "sent"],
                "description": "over per_approver_limit: held for the digest (status pending), sent in it (status sent)",
            },
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
    "ReviewLinkDecision": obj(
        {
            "decision": {"type": "string", "enum": ["approve", "deny"]},
            "credential": {"type": "object", "description": "the PublicKeyCredential of the assertion"},
            "reason": STRING,
            "grant_type": STRING,
            "duration": INT,
        },
        ("decision", "credential"),
    ),
    "PushSubscription": obj(
        {"id": STRING, "endpoint": STRING, "expirationTime": {"type": ["integer", "null"]}, "created_at": MS},
        ("id", "endpoint", "expirationTime", "created_at"),
    ),
    "PushSubscriptionBody": obj(
        {
            "endpoint": STRING,
            "keys": obj({"p256dh": STRING, "auth": STRING}, ("p256dh", "auth")),
            "expirationTime": {"type": ["integer", "null"]},
        },
        ("endpoint", "keys"),
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

REVIEW_LINK = "/r/{token}"

NOTIFY_OPERATIONS: tuple[Op, ...] = (
    Op(
        "GET",
        "/api/push/vapid",
        "notify.push_vapid",
        "The Web Push application server key (VAPID, base64url uncompressed P-256); 404 without Web Push",
        ok={200: Ok(obj({"publicKey": STRING}, ("publicKey",)))},
        errors=(404,),
        tag="notifications",
    ),
    Op(
        "POST",
        "/api/push/subscriptions",
        "notify.push_subscribe",
        "Subscribe this browser to Web Push (the endpoint must be https on allowed_push_hosts, public)",
        PERSON,
        "PushSubscriptionBody",
        ok={201: Ok(ref("PushSubscription"), "Created")},
        errors=(404, 409),
        tag="notifications",
    ),
    Op(
        "GET",
        "/api/push/subscriptions",
        "notify.push_subscriptions",
        "The signed-in person's Web Push subscriptions",
        PERSON,
        ok={200: Ok(obj({"data": array(ref("PushSubscription"))}, ("data",)))},
        tag="notifications",
    ),
    Op(
        "DELETE",
        "/api/push/subscriptions/{subscription_id}",
        "notify.push_unsubscribe",
        "Remove one of the signed-in person's Web Push subscriptions",
        PERSON,
        ok={200: Ok(obj({"deleted": STRING}, ("deleted",)))},
        tag="notifications",
    ),
    Op(
        "POST",
        REVIEW_LINK + "/options",
        "review_links.review_link_options",
        "WebAuthn request options (user verification required) over the linked grant's digest and a "
        "single-use nonce, for the person the review link was sent to (D15)",
        PERSON,
        ok={200: Ok(ANY_OBJECT)},
        errors=(400, 409, 410),  # not under /api: its malformed-JSON 400 is named here
        tag="notifications",
    ),
    Op(
        "POST",
        REVIEW_LINK,
        "review_links.review_link_decide",
        "Approve or deny the linked grant with a fresh passkey assertion over its digest (D15)",
        PERSON,
        "ReviewLinkDecision",
        ok={200: Ok(ref("Decision"))},
        errors=(400, 409, 410),  # not under /api: its malformed-JSON 400 is named here
        tag="notifications",
    ),
    Op(
        "POST",
        REVIEW_LINK + "/deny",
        "review_links.review_link_deny",
        "Deny the linked grant with a single-use deny link from a chat or phone notice (never approves)",
        NONE,
        body=None,
        ok={200: Ok(obj({"grant": obj({"id": STRING, "status": STRING}, ("id", "status"))}, ("grant",)))},
        errors=(401, 403, 404, 409, 410),
        tag="notifications",
    ),
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
