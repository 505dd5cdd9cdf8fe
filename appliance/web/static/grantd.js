// grantd pages: the passkey ceremonies and the calls to the JSON API. No framework, no build step.
// Every change goes through fetch() with a JSON body on this origin (D8's CSRF rule); no page
// posts an HTML form. Text from the server is put in the page with textContent, never as HTML,
// except the grant lists, which are this server's own escaped rendering of /grants?part=list.
"use strict";

(function () {
  // -- base64url <-> ArrayBuffer ------------------------------------------------------------------
  function toBuffer(value) {
    const b64 = value.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((value.length + 3) % 4);
    const bytes = atob(b64);
    const out = new Uint8Array(bytes.length);
    for (let i = 0; i < bytes.length; i++) out[i] = bytes.charCodeAt(i);
    return out.buffer;
  }

  function toBase64url(buffer) {
    const bytes = new Uint8Array(buffer);
    let s = "";
    for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // -- the JSON API -------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const init = { method: method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, "The server cannot be reached. Check your connection and try again.");
    }
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      data = null;
    }
    if (!response.ok) {
      const page = document.body.dataset.page;
      if (response.status === 401 && page !== "login" && page !== "register") {
        signedOut(); // the session ended (signed out elsewhere, or revoked)
      }
      const detail = data && (data.detail || data.error_description || data.title);
      throw new ApiError(response.status, detail || "The request failed (" + response.status + ").");
    }
    return data;
  }

  // The session ended (signed out elsewhere, or revoked by an administrator): sign in again.
  function signedOut() {
    const here = location.pathname + location.search;
    location.assign("/login?next=" + encodeURIComponent(here));
  }

  // -- status line --------------------------------------------------------------------------------
  function say(text, kind) {
    const el = document.querySelector("[data-status]");
    if (!el) return;
    el.textContent = text;
    el.className = "status" + (kind ? " " + kind : "");
    el.hidden = !text;
  }

  function failed(error) {
    if (error && error.name === "NotAllowedError") {
      say("The passkey prompt was closed or timed out. Try again when you are ready.", "error");
    } else if (error && error.name === "InvalidStateError") {
      say("This device already holds a passkey for this account.", "error");
    } else {
      say((error && error.message) || String(error), "error");
    }
  }

  // Runs an action with its button disabled, reporting errors in the status line.
  async function busy(button, action) {
    if (button) button.disabled = true;
    say("");
    try {
      await action();
    } catch (error) {
      failed(error);
    } finally {
      if (button) button.disabled = false;
    }
  }

  // -- WebAuthn ceremonies ------------------------------------------------------------------------
  function creationOptions(options) {
    const o = Object.assign({}, options.publicKey || options);
    o.challenge = toBuffer(o.challenge);
    o.user = Object.assign({}, o.user, { id: toBuffer(o.user.id) });
    o.excludeCredentials = (o.excludeCredentials || []).map(function (c) {
      return Object.assign({}, c, { id: toBuffer(c.id) });
    });
    return o;
  }

  function requestOptions(options) {
    const o = Object.assign({}, options.publicKey || options);
    o.challenge = toBuffer(o.challenge);
    o.allowCredentials = (o.allowCredentials || []).map(function (c) {
      return Object.assign({}, c, { id: toBuffer(c.id) });
    });
    return o;
  }

  function credentialJSON(credential) {
    const r = credential.response;
    const response = { clientDataJSON: toBase64url(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = toBase64url(r.attestationObject);
      response.transports = typeof r.getTransports === "function" ? r.getTransports() : [];
    }
    if (r.authenticatorData) response.authenticatorData = toBase64url(r.authenticatorData);
    if (r.signature) response.signature = toBase64url(r.signature);
    if (r.userHandle) response.userHandle = toBase64url(r.userHandle);
    return {
      id: credential.id,
      rawId: toBase64url(credential.rawId),
      type: credential.type,
      response: response,
      authenticatorAttachment: credential.authenticatorAttachment || null,
      clientExtensionResults: credential.getClientExtensionResults ? credential.getClientExtensionResults() : {},
    };
  }

  function needWebAuthn() {
    if (!window.PublicKeyCredential || !navigator.credentials) {
      throw new Error("This browser cannot use passkeys here (it needs https, or http://localhost).");
    }
  }

  async function createPasskey(options) {
    needWebAuthn();
    const credential = await navigator.credentials.create({ publicKey: creationOptions(options) });
    return credentialJSON(credential);
  }

  async function getPasskey(options) {
    needWebAuthn();
    const credential = await navigator.credentials.get({ publicKey: requestOptions(options) });
    return credentialJSON(credential);
  }

  function nextPath() {
    const holder = document.querySelector("[data-next]");
    const next = holder ? holder.dataset.next : "/grants";
    // The server already made it a local path; check again so nothing else is ever followed.
    return next && next.charAt(0) === "/" && next.charAt(1) !== "/" && next.charAt(1) !== "\\" ? next : "/grants";
  }

  async function login(email) {
    say("Waiting for your passkey…");
    const options = await api("POST", "/api/webauthn/login/options", email ? { email: email } : {});
    const response = await getPasskey(options);
    await api("POST", "/api/webauthn/login/verify", { response: response });
    say("Signed in.", "ok");
    location.assign(nextPath());
  }

  async function register(button) {
    const token = document.querySelector("[data-token]").dataset.token;
    const nameField = document.getElementById("passkey-name");
    say("Waiting for your device…");
    const options = await api("POST", "/api/webauthn/register/options", { token: token });
    const response = await createPasskey(options);
    const body = { token: token, response: response };
    if (nameField && nameField.value.trim()) body.name = nameField.value.trim();
    await api("POST", "/api/webauthn/register/verify", body);
    say("Your passkey is registered and you are signed in.", "ok");
    button.hidden = true;
    location.assign("/grants");
  }

  async function decideFromLink(decision) {
    const holder = document.querySelector("[data-review-link]");
    const base = "/r/" + encodeURIComponent(holder.dataset.reviewLink);
    const reason = document.getElementById("link-reason").value.trim();
    say("Confirm with your passkey…");
    const options = await api("POST", base + "/options", {});
    const credential = await getPasskey(options);
    const body = { decision: decision, credential: credential };
    if (reason) body.reason = reason;
    await api("POST", base, body);
    say(decision === "approve" ? "Approved." : "Denied.", "ok");
    location.assign("/grant-approval?grant_id=" + encodeURIComponent(holder.dataset.grantId));
  }

  // D15: Web Push in this browser: the service worker /sw.js, then a subscription to the server's
  // VAPID key (userVisibleOnly: every push shows a notification), then its endpoint and keys to grantd.
  async function pushSubscribe() {
    if (!("serviceWorker" in navigator) || !("PushManager" in window)) {
      throw new Error("This browser cannot receive push notifications here.");
    }
    if ((await Notification.requestPermission()) !== "granted") {
      throw new Error("Notifications are blocked for this site in the browser's settings.");
    }
    const key = await api("GET", "/api/push/vapid");
    const registration = await navigator.serviceWorker.register("/sw.js");
    await navigator.serviceWorker.ready;
    const subscription = await registration.pushManager.subscribe({
      userVisibleOnly: true,
      applicationServerKey: toBuffer(key.publicKey),
    });
    const json = subscription.toJSON();
    await api("POST", "/api/push/subscriptions", {
      endpoint: json.endpoint,
      keys: json.keys,
      expirationTime: json.expirationTime === undefined ? null : json.expirationTime,
    });
    say("Notifications are on in this browser.", "ok");
    location.reload();
  }

  async function addCredential() {
    const nameField = document.getElementById("new-passkey-name");
    // First confirm it is you, with a passkey you already have (user verification required):
    // a signed-in session alone cannot add a passkey.
    say("Confirm with one of your passkeys…");
    const reauth = await api("POST", "/api/webauthn/credentials/add/reauth", {});
    const assertion = await getPasskey(reauth);
    const options = await api("POST", "/api/webauthn/credentials/add/options", { response: assertion });
    say("Now create the new passkey on your device…");
    const response = await createPasskey(options);
    const body = { response: response };
    if (nameField && nameField.value.trim()) body.name = nameField.value.trim();
    await api("POST", "/api/webauthn/credentials/add/verify", body);
    location.reload();
  }

  // -- grants -------------------------------------------------------------------------------------
  function formValues(form) {
    const values = {};
    new FormData(form).forEach(function (value, key) {
      values[key] = typeof value === "string" ? value.trim() : value;
    });
    return values;
  }

  async function approve(form) {
    const values = formValues(form);
    const body = {};
    if (values.grant_type && values.grant_type !== form.dataset.requestedType) body.grant_type = values.grant_type;
    if ((values.grant_type || form.dataset.requestedType) === "timed" && values.duration) {
      const seconds = Number(values.duration);
      if (!Number.isInteger(seconds) || seconds <= 0) throw new Error("The duration must be a whole number of seconds.");
      body.duration = seconds;
    }
    await api("POST", "/api/grants/" + encodeURIComponent(form.dataset.grantId) + "/approve", body);
    location.reload();
  }

  async function deny(form) {
    const values = formValues(form);
    const body = values.reason ? { reason: values.reason } : {};
    await api("POST", "/api/grants/" + encodeURIComponent(form.dataset.grantId) + "/deny", body);
    location.reload();
  }

  function showDuration(form) {
    const field = form.querySelector("[data-duration-field]");
    if (!field) return;
    const chosen = form.querySelector("input[name=grant_type]:checked");
    field.hidden = !chosen || chosen.value !== "timed";
  }

  // The grant event stream (cookie-authenticated, same origin): refresh what the page shows.
  function follow(onChange) {
    if (!window.EventSource) return;
    const indicator = document.querySelector("[data-live]");
    let timer = null;
    const changed = function () {
      clearTimeout(timer);
      timer = setTimeout(onChange, 150);
    };
    const source = new EventSource("/api/grants/events");
    ["grant.created", "grant.approved", "grant.denied", "grant.revoked", "grant.consumed", "grant.expired", "reset"]
      .forEach(function (name) { source.addEventListener(name, changed); });
    source.addEventListener("open", function () {
      if (indicator) {
        indicator.classList.remove("offline");
        indicator.dataset.state = "open";
      }
      changed(); // whatever happened between the page's rendering and the stream's opening
    });
    source.addEventListener("error", function () {
      if (indicator) {
        indicator.classList.add("offline");
        indicator.dataset.state = "reconnecting";
      }
      // A stream refused for good (401: the session ended) is not retried by the browser.
      if (source.readyState === EventSource.CLOSED) {
        fetch("/api/me", { credentials: "same-origin" }).then(function (r) {
          if (r.status === 401) signedOut();
        }).catch(function () {});
      }
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  async function refreshGrantLists() {
    const holder = document.querySelector("[data-grant-lists]");
    const response = await fetch("/grants?part=list", { credentials: "same-origin", redirect: "manual" });
    if (response.type === "opaqueredirect" || response.status === 401 || response.redirected) {
      signedOut();
      return;
    }
    if (!response.ok) return;
    // Our own server's rendering of the same lists (autoescaped); focus stays where it was if possible.
    const focused = document.activeElement && document.activeElement.closest("[data-grant-id]");
    const focusedId = focused ? focused.dataset.grantId : null;
    holder.innerHTML = await response.text();
    if (focusedId) {
      const again = holder.querySelector('[data-grant-id="' + CSS.escape(focusedId) + '"] a');
      if (again) again.focus();
    }
  }

  // -- admin --------------------------------------------------------------------------------------
  function showNewLink(answer) {
    const box = document.querySelector("[data-new-link]");
    box.querySelector('[data-field="email"]').textContent = answer.email;
    box.querySelector('[data-field="expires"]').textContent = new Date(answer.expires_at).toLocaleString();
    box.querySelector('[data-field="url"]').value = answer.url;
    box.hidden = false;
    box.querySelector('[data-field="url"]').focus();
    box.querySelector('[data-field="url"]').select();
  }

  async function addPerson(form) {
    const values = formValues(form);
    if (!values.email) throw new Error("Enter the person's e-mail address.");
    const body = { email: values.email, admin: form.querySelector("input[name=admin]").checked, purpose: "register" };
    if (values.name) body.name = values.name;
    const answer = await api("POST", "/api/admin/registration-urls", body);
    showNewLink(answer);
    form.reset();
    say("Added " + answer.email + ". Reload the page to see them in the lists.", "ok");
  }

  async function personLink(button) {
    const email = button.dataset.email;
    let answer;
    try {
      answer = await api("POST", "/api/admin/registration-urls", { email: email, purpose: "register" });
    } catch (error) {
      if (error.status !== 409) throw error;
      // They have a passkey already: a link to add another device.
      answer = await api("POST", "/api/admin/registration-urls", { email: email, purpose: "add-device" });
    }
    showNewLink(answer);
  }

  const adminActions = {
    "person-delete": async function (b) {
      if (!confirm("Delete " + b.dataset.email + "? Their passkeys and sessions end now.")) return;
      await api("DELETE", "/api/admin/users/" + encodeURIComponent(b.dataset.email));
      location.reload();
    },
    "person-sessions-revoke": async function (b) {
      const answer = await api("DELETE", "/api/admin/sessions/user/" + encodeURIComponent(b.dataset.email));
      say("Ended " + answer.revoked + " session(s) of " + b.dataset.email + ".", "ok");
    },
    "person-link": personLink,
    "registration-delete": async function (b) {
      await api("DELETE", "/api/admin/registration-urls/" + encodeURIComponent(b.dataset.id));
      location.reload();
    },
    "session-revoke": async function (b) {
      await api("DELETE", "/api/admin/sessions/" + encodeURIComponent(b.dataset.id));
      location.reload();
    },
    "agent-status": async function (b) {
      await api("PUT", "/api/admin/agents/" + encodeURIComponent(b.dataset.id), { status: b.dataset.status });
      location.reload();
    },
    copy: async function () {
      const field = document.querySelector('[data-new-link] [data-field="url"]');
      field.select();
      if (navigator.clipboard) await navigator.clipboard.writeText(field.value);
      say("Link copied.", "ok");
    },
  };

  // -- enrolment ----------------------------------------------------------------------------------
  async function enroll(form) {
    const values = formValues(form);
    const body = { name: values.name, publicKey: values.publicKey };
    if (values.email) body.email = values.email;
    const answer = await api("POST", "/api/agent/enroll", body);
    const done = document.querySelector("[data-enrolled]");
    ["name", "email", "agent_id", "owner"].forEach(function (key) {
      done.querySelector('[data-field="' + key + '"]').textContent = answer[key];
    });
    form.hidden = true;
    done.hidden = false;
    say("Enrolled " + answer.email + ".", "ok");
  }

  // -- the device grant (/device): approve or deny a terminal's sign-in ---------------------------
  async function decideDevice(approve) {
    const card = document.querySelector("[data-device]");
    const answer = await api("POST", "/api/device/decide", { user_code: card.dataset.userCode, approve: approve });
    card.dataset.deviceStatus = answer.status;
    const buttons = card.querySelector("[data-device-buttons]");
    if (buttons) buttons.hidden = true;
    say(answer.status === "approved"
      ? "Approved. " + answer.client_name + " is signed in as you; you can close this page."
      : "Denied. " + answer.client_name + " is not signed in.", answer.status === "approved" ? "ok" : "");
  }

  // -- OAuth consent (a JSON POST answering {location}: nothing is approved by a GET) --------------
  async function answerConsent(approve) {
    const card = document.querySelector("[data-consent]");
    const body = { request: card.dataset.consent, approve: approve };
    if (card.dataset.ticket) body.ticket = card.dataset.ticket;  // this page's one-time approval ticket
    let answer = await api("POST", "/authorize/consent", body);
    if (answer.pending) {  // a grant-gated scope (D17): wait here until an approver decides
      card.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
      const status = card.querySelector("[data-grant-status]");
      if (status) status.textContent = "Waiting for an approver to decide grant " + answer.grant_id + "…";
      while (!answer.location) {
        await new Promise(function (done) { setTimeout(done, 2000); });
        answer = await api("GET", answer.poll || "", undefined).then(function (a) {
          return Object.assign({ poll: answer.poll }, a);
        });
      }
    }
    location.assign(answer.location);
  }

  // -- wiring -------------------------------------------------------------------------------------
  const clickActions = Object.assign({
    "device-approve": function () { return decideDevice(true); },
    "device-deny": function () { return decideDevice(false); },
    logout: async function () {
      await api("POST", "/api/logout");
      location.assign("/login");
    },
    "login-discoverable": function () { return login(null); },
    register: register,
    "add-credential": addCredential,
    "delete-credential": async function (b) {
      await api("DELETE", "/api/webauthn/credentials/" + encodeURIComponent(b.dataset.id));
      location.reload();
    },
    "end-session": async function (b) {
      await api("DELETE", "/api/sessions/" + encodeURIComponent(b.dataset.id));
      location.reload();
    },
    "consent-approve": function () { return answerConsent(true); },
    "consent-deny": function () { return answerConsent(false); },
    "withdraw-consent": async function (b) {
      await api("DELETE", "/api/account/consents/" + encodeURIComponent(b.dataset.client));
      location.reload();
    },
    // D15: a review link decides with a fresh passkey assertion over the grant's digest
    "link-approve": function () { return decideFromLink("approve"); },
    "push-subscribe": pushSubscribe,
    "push-unsubscribe": async function (b) {
      await api("DELETE", "/api/push/subscriptions/" + encodeURIComponent(b.dataset.id));
      location.reload();
    },
    "link-deny": function () { return decideFromLink("deny"); },
    "revoke-grant": async function (b) {
      await api("POST", "/api/grants/" + encodeURIComponent(b.dataset.id) + "/revoke", {});
      location.reload();
    },
  }, adminActions);

  const formActions = {
    "login-email": function (form) {
      const email = form.querySelector("input[name=email]").value.trim();
      if (!email) throw new Error("Enter your e-mail address.");
      return login(email);
    },
    // SP login (docs/sp.md): on to the IdP of the e-mail's domain; a guest's page is / afterwards
    "sp-login": async function (form) {
      const email = form.querySelector("input[name=email]").value.trim();
      if (!email) throw new Error("Enter your e-mail address.");
      const answer = await api("POST", "/api/login", { email: email });
      location.assign(answer.redirectUrl);
    },
    approve: approve,
    deny: deny,
    enroll: enroll,
    "add-person": addPerson,
  };

  document.addEventListener("click", function (event) {
    const button = event.target.closest("button[data-action]");
    if (!button || !clickActions[button.dataset.action]) return;
    event.preventDefault();
    busy(button, function () { return clickActions[button.dataset.action](button); });
  });

  document.addEventListener("submit", function (event) {
    const form = event.target;
    const action = formActions[form.dataset.form];
    if (!action) return; // plain GET forms (search) navigate as usual
    event.preventDefault();
    busy(form.querySelector("button[type=submit]"), function () { return action(form); });
  });

  document.addEventListener("change", function (event) {
    const form = event.target.closest("form[data-form=approve]");
    if (form) showDuration(form);
  });

  function start() {
    const page = document.body.dataset.page;
    document.querySelectorAll("form[data-form=approve]").forEach(showDuration);
    if (page === "grants") follow(refreshGrantLists);
    if (page === "grant-approval") {
      const card = document.querySelector("[data-grant-status]");
      if (card && card.dataset.grantStatus === "pending") {
        const id = card.dataset.grant;
        // Decided elsewhere (the TUI, another approver): show the outcome.
        follow(async function () {
          const grant = await api("GET", "/api/grants/" + encodeURIComponent(id));
          if (grant.status !== "pending") location.reload();
        });
      }
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
