// grantd's service worker (D15): shows Web Push notices and opens their review link. A notice's tag
// is the grant's Topic, so a "resolved" notice replaces the pending one on the device. Only links
// to this origin are opened. Nothing here approves: the link opens the review page, where
// approving needs the person's passkey.
"use strict";

self.addEventListener("push", function (event) {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch (e) {
    data = {};
  }
  const options = {
    body: typeof data.body === "string" ? data.body : "",
    data: { url: typeof data.url === "string" ? data.url : "/grants" },
  };
  if (typeof data.tag === "string" && data.tag) {
    options.tag = data.tag;
    options.renotify = data.kind !== "resolved";
  }
  const title = typeof data.title === "string" && data.title ? data.title : "grantd";
  event.waitUntil(self.registration.showNotification(title, options));
});

self.addEventListener("notificationclick", function (event) {
  event.notification.close();
  const wanted = (event.notification.data && event.notification.data.url) || "/grants";
  let url;
  try {
    url = new URL(wanted, self.location.origin);
  } catch (e) {
    return;
  }
  if (url.origin !== self.location.origin) return;
  event.waitUntil(self.clients.openWindow(url.href));
});
