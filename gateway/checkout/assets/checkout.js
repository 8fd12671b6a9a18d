// The checkout form's behaviour. Plain browser JavaScript, inlined into the
// page under a CSP hash, so it must not depend on anything external. The
// server checks everything again; these checks only save a round trip.
(function () {
  "use strict";
  // Relative to the page, so a CHECKOUT_BASE_URL with a path prefix works.
  var payUrl = location.pathname.replace(/\/+$/, "") + "/pay";
  // The attempt whose outcome is unknown (under way, its answers lost, or
  // 503s until the retries ran out): clicking Pay again with the same details
  // asks again with its key, so a payment that went through is shown, not
  // refused as "already used". Any definite answer ends it. Kept in this
  // tab's sessionStorage as well, because a reload while it was under way
  // would otherwise make its retry a new attempt, and a reload after it
  // paid shows the used link's page, which asks what became of it. It holds
  // what the server tells requests apart by (the method, and the card's last
  // four digits, length, expiry and name), never a card number or CVC.
  var ATTEMPT_ITEM = "paylink attempt " + payUrl;
  var unsettled = recallAttempt();
  // The keys of earlier attempts of this tab whose outcome was never known,
  // left for one with other details: one of them may be what paid the link,
  // so a 409 asks after each before it says "already used" (a review paid,
  // lost the answer, paid again with another card and was told the link was
  // used, the payment's id forgotten). Kept until an answer settles them.
  var EARLIER_ITEM = "paylink earlier attempts " + payUrl;
  var earlier = recallList(EARLIER_ITEM);
  // The key of the attempt this tab saw pay the link: back on the page from
  // the merchant's, or reloading it, the customer sees their payment, not
  // "already used ... if you were not expecting this".
  var PAID_ITEM = "paylink paid " + payUrl;
  var paidKey = recallList(PAID_ITEM)[0];
  var form = document.getElementById("pay-form");
  if (!form) return askLostAttempt();
  var status = document.getElementById("status");
  var fields = document.getElementById("pay-fields");
  var cancel = document.getElementById("cancel-link");
  var button = document.getElementById("pay-button");
  var cardFields = document.getElementById("card-fields");
  var bankFields = document.getElementById("bank-fields");
  var success = document.getElementById("success");
  var number = document.getElementById("card-number");
  var expiry = document.getElementById("card-expiry");
  var cvc = document.getElementById("card-cvc");
  var name = document.getElementById("card-name");
  var payLabel = button.textContent;
  var busy = false;
  // The link can no longer be paid (404, 409, 410): Pay stays off for good.
  var retired = false;
  // A try of this page's attempt got no definite answer (lost, or a 5xx):
  // it may have paid, so the cancel link stays off until the attempt settles.
  var doubtful = false;
  // The link's time ran out while the page was open. Counted from the
  // server's clock when it made the page, so a customer's wrong clock does
  // not move it.
  var lapsed = false;
  if (form.hasAttribute("data-expires-in-ms")) {
    setTimeout(function () {
      lapsed = true;
      lapseIfClear();
    }, Number(form.getAttribute("data-expires-in-ms")) || 0);
  }

  function recallAttempt() {
    try {
      var saved = JSON.parse(window.sessionStorage.getItem(ATTEMPT_ITEM) || "null");
      return saved && typeof saved.shape === "string" && typeof saved.key === "string" ? saved : null;
    } catch (e) {
      return null; // storage off or unreadable: this page's memory only
    }
  }

  function recallList(item) {
    try {
      var saved = JSON.parse(window.sessionStorage.getItem(item) || "[]");
      return Array.isArray(saved) ? saved.filter(function (key) { return typeof key === "string"; }).slice(-10) : [];
    } catch (e) {
      return [];
    }
  }

  function keepList(item, keys) {
    try {
      if (keys.length) window.sessionStorage.setItem(item, JSON.stringify(keys.slice(-10)));
      else window.sessionStorage.removeItem(item);
    } catch (e) {
      // Storage off: this page's memory only.
    }
  }

  function keepEarlier(keys) {
    earlier = keys.slice(-10);
    keepList(EARLIER_ITEM, earlier);
  }

  function keepPaid(key) {
    paidKey = key;
    keepList(PAID_ITEM, [key]);
    keepEarlier([]); // the link is paid: no other attempt can have paid it
  }

  // Asks after each attempt by its key alone, in turn: the answer of the one
  // that paid the link, or null. A key answered 404 did not pay and is
  // forgotten; one whose answer did not come is kept for the next ask.
  function findPaid(keys) {
    var open = [];
    return keys.reduce(function (found, key) {
      return found.then(function (paid) {
        if (paid) return paid;
        return fetch(payUrl, {
          headers: { accept: "application/json", "idempotency-key": key },
          credentials: "same-origin",
          cache: "no-store",
        }).then(function (res) {
          if (res.ok) {
            return res.json().then(function (result) {
              if (isPayment(result)) return { key: key, result: result };
              open.push(key);
              return null;
            }, function () {
              open.push(key);
              return null;
            });
          }
          if (res.status !== 404) open.push(key);
          return null;
        }, function () {
          open.push(key);
          return null;
        });
      });
    }, Promise.resolve(null)).then(function (paid) {
      if (paid) keepPaid(paid.key);
      else keepEarlier(open);
      return paid && paid.result;
    });
  }

  // A 2xx is a payment only with the body of one.
  function isPayment(result) {
    return Boolean(result) && result.status === "succeeded" && typeof result.payment_id === "string" && result.payment_id !== "";
  }

  // On a used link's page: an attempt of this tab may be what paid it. One
  // it saw pay is shown as paid; one whose answer was lost sends the customer
  // on to redirect_url as its answer would have.
  function askLostAttempt() {
    if (unsettled) {
      keepEarlier(earlier.concat(unsettled.key));
      keepAttempt(null);
    }
    var seen = paidKey;
    var keys = seen ? [seen] : earlier;
    if (!keys.length) return;
    findPaid(keys).then(function (result) {
      if (!result) return;
      // Not sent to the merchant again: a customer back from there pressed Back.
      var target = seen ? "" : redirectOf(result);
      if (target) return location.assign(target);
      document.title = "Payment complete";
      document.getElementById("outcome-title").textContent = "Payment complete";
      document.getElementById("outcome-message").textContent = "Your payment went through. You can close this page.";
      document.getElementById("payment-id").textContent = result.payment_id || "";
      document.getElementById("outcome-payment").hidden = false;
      // Said to a screen reader too: the page it read said "already used".
      var title = document.getElementById("outcome-title");
      title.tabIndex = -1;
      title.focus();
    }).catch(function () {});
  }

  function keepAttempt(attempt) {
    unsettled = attempt;
    try {
      if (attempt) window.sessionStorage.setItem(ATTEMPT_ITEM, JSON.stringify(attempt));
      else window.sessionStorage.removeItem(ATTEMPT_ITEM);
    } catch (e) {
      // Storage off (a private window's policy, say): the attempt lives in this page only, as it always did.
    }
  }

  function shapeOf(body) {
    var card = body.card;
    return JSON.stringify([body.payment_method, card ? [card.number.slice(-4), card.number.length, card.exp_month, card.exp_year, card.name || ""] : null]);
  }

  function method() {
    var input = form.elements.namedItem("payment_method");
    return input ? input.value : "card";
  }

  function showMethod() {
    var card = method() === "card";
    if (cardFields) {
      cardFields.hidden = !card;
      cardFields.querySelectorAll("input").forEach(function (i) { i.disabled = !card; });
    }
    if (bankFields) bankFields.hidden = card;
  }

  function announce(message, kind) {
    status.className = "status " + (kind || "");
    status.textContent = message;
  }

  function setError(input, message) {
    var box = document.getElementById(input.id + "-error");
    input.setAttribute("aria-invalid", message ? "true" : "false");
    box.textContent = message || "";
    box.hidden = !message;
  }

  function digitsOf(text) {
    return text.replace(/[\s-]/g, "");
  }

  function luhn(digits) {
    var sum = 0;
    for (var i = 0; i < digits.length; i++) {
      var d = digits.charCodeAt(digits.length - 1 - i) - 48;
      if (i % 2 === 1) { d *= 2; if (d > 9) d -= 9; }
      sum += d;
    }
    return sum % 10 === 0;
  }

  // "MM/YY", "MM / YY", "MMYY" or "MM/YYYY".
  function parseExpiry(text) {
    var m = /^\s*(\d{1,2})\s*[\/-]?\s*(\d{2}|\d{4})\s*$/.exec(text);
    if (!m) return null;
    var month = Number(m[1]);
    var year = Number(m[2]);
    if (year < 100) year += 2000;
    if (month < 1 || month > 12) return null;
    return { month: month, year: year };
  }

  // Every problem at once, each next to its field; the first is announced.
  function checkCard() {
    var problems = [];
    var digits = digitsOf(number.value);
    var numberError = !digits ? "Enter your card number." :
      !/^\d{12,19}$/.test(digits) || !luhn(digits) ? "This card number is not valid. Check it and try again." : "";
    var exp = parseExpiry(expiry.value);
    // The server's month, UTC's: a card is good through the last day of its
    // month there, and the device's month refused it east of UTC for hours.
    var now = new Date();
    var expiryError = !expiry.value.trim() ? "Enter the expiry date." :
      !exp ? "Enter the expiry date as MM/YY." :
      exp.year * 12 + exp.month < now.getUTCFullYear() * 12 + now.getUTCMonth() + 1 ? "This card has expired." : "";
    var cvcError = /^\d{3,4}$/.test(cvc.value.trim()) ? "" : "Enter the 3 or 4 digit security code.";
    [[number, numberError], [expiry, expiryError], [cvc, cvcError]].forEach(function (pair) {
      setError(pair[0], pair[1]);
      if (pair[1]) problems.push(pair);
    });
    return problems;
  }

  // aria-busy on the fields, never on an ancestor of #status: a screen
  // reader may hold back what a busy region's live region says.
  function markBusy(on) {
    if (on) fields.setAttribute("aria-busy", "true");
    else fields.removeAttribute("aria-busy");
  }

  // Leaving for the merchant's cancel page while a payment may be going
  // through could leave a customer who paid believing they cancelled.
  function holdExit(held) {
    if (!cancel) return;
    if (held) {
      cancel.setAttribute("aria-disabled", "true");
      cancel.tabIndex = -1;
    } else {
      cancel.removeAttribute("aria-disabled");
      cancel.removeAttribute("tabindex");
    }
  }

  function start() {
    busy = true;
    markBusy(true);
    holdExit(true);
    button.disabled = true;
    button.textContent = "Processing\u2026";
    announce("Processing your payment\u2026", "info");
  }

  // The attempt ended without paying. Disabling the Pay button sent the
  // keyboard focus to <body>: it comes back to the button, or to the field
  // the answer refused, so the customer can act on the answer from there.
  function finish(message, focusOn) {
    busy = false;
    markBusy(false);
    holdExit(doubtful);
    button.disabled = false;
    button.textContent = payLabel;
    announce(message, "error");
    (focusOn || button).focus();
    lapseIfClear();
  }

  // Once the link has lapsed, Pay goes off rather than send an attempt the
  // server can only refuse; but not while an attempt is under way or its
  // outcome unknown: it may have paid the link, and asking again with its
  // key is how the customer finds out. Nor does it say nothing was taken: a
  // link paid in another tab lapses here too.
  function lapseIfClear() {
    if (!lapsed || busy || retired || unsettled || earlier.length || !success.hidden) return;
    retire();
    var expiryNote = document.getElementById("expiry-note");
    if (expiryNote) expiryNote.hidden = true;
    announce("This payment link has expired. Ask the merchant for a new link if you still need to pay.", "error");
  }

  // aria-disabled, not disabled: a disabled button cannot hold the focus.
  function retire() {
    retired = true;
    button.setAttribute("aria-disabled", "true");
  }

  // The refusals of one card field the server words (services/links/card.ts),
  // shown at that field as the page's own checks are.
  var REFUSED_FIELDS = { "Invalid card number": "card-number", "Card has expired": "card-expiry" };

  function refusedField(message) {
    var input = REFUSED_FIELDS.hasOwnProperty(message) ? document.getElementById(REFUSED_FIELDS[message]) : null;
    if (!input || input.disabled) return null;
    setError(input, message + ".");
    return input;
  }

  // Where a paid attempt's answer sends the customer: its http(s) redirect_url, or nowhere.
  function redirectOf(result) {
    var target = typeof result.redirect_url === "string" ? result.redirect_url : "";
    return /^https?:\/\//i.test(target) ? target : "";
  }

  function succeed(result) {
    var target = redirectOf(result);
    if (target) {
      // Paid: Pay and the cancel link stay off while the merchant's page loads.
      markBusy(false);
      announce("Payment successful. Taking you back to the merchant\u2026", "success");
      location.assign(target);
      return;
    }
    form.hidden = true;
    var expiryNote = document.getElementById("expiry-note");
    if (expiryNote) expiryNote.hidden = true; // paid: the deadline no longer matters
    document.getElementById("payment-id").textContent = result.payment_id || "";
    success.hidden = false;
    success.focus();
  }

  // A link that takes bank transfers only has no card fields.
  if (number) number.addEventListener("input", function () {
    // Group digits in fours as people read them, only while typing at the end.
    if (number.selectionStart !== number.value.length) return;
    var digits = number.value.replace(/\D/g, "").slice(0, 19);
    number.value = digits.replace(/(\d{4})(?=\d)/g, "$1 ");
  });
  if (expiry) expiry.addEventListener("blur", function () {
    var exp = parseExpiry(expiry.value);
    if (exp) expiry.value = (exp.month < 10 ? "0" : "") + exp.month + " / " + String(exp.year).slice(-2);
  });
  form.addEventListener("change", function (event) {
    if (event.target && event.target.name === "payment_method") showMethod();
  });

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (busy || retired) return;
    var body = { payment_method: method() };
    if (body.payment_method === "card") {
      var problems = checkCard();
      if (problems.length) {
        announce(problems[0][1], "error");
        problems[0][0].focus();
        return;
      }
      var exp = parseExpiry(expiry.value);
      body.card = { number: digitsOf(number.value), exp_month: exp.month, exp_year: exp.year, cvc: cvc.value.trim() };
      if (name.value.trim()) body.card.name = name.value.trim();
    }
    start();
    // One key per attempt; every retry of this attempt sends the same one,
    // so a payment whose answer was lost is answered, never charged twice
    // and never told the link is used (CONTRACT "Retrying a payment").
    var shape = shapeOf(body);
    if (!unsettled || unsettled.shape !== shape) {
      doubtful = false;
      if (unsettled) keepEarlier(earlier.concat(unsettled.key));
      keepAttempt({ shape: shape, key: newKey() });
    }
    send(JSON.stringify(body), unsettled.key, 0);
  });

  var NOTHING_TAKEN = " No payment was taken for this attempt.";

  // Waits before each retry of an attempt: about 8 s in all before giving up.
  var RETRY_DELAYS_MS = [300, 700, 1500, 2500, 3500];

  function newKey() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return (b < 16 ? "0" : "") + b.toString(16); }).join("");
  }

  function retryOrFail(json, key, tries, message) {
    doubtful = true;
    if (tries >= RETRY_DELAYS_MS.length) return finish(message);
    announce("Still processing your payment\u2026", "info");
    var base = RETRY_DELAYS_MS[tries];
    setTimeout(function () { send(json, key, tries + 1); }, base + Math.floor(Math.random() * base * 0.3));
  }

  function send(json, key, tries) {
    fetch(payUrl, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json", "idempotency-key": key },
      body: json,
      credentials: "same-origin",
      cache: "no-store",
    }).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (data) {
        var message = data && typeof data.error === "string" ? data.error : "Something went wrong";
        if (res.status === 429) {
          // Refused before it was tried: whatever an earlier try of this attempt did is still unknown.
          var wait = Number(res.headers.get("retry-after"));
          return finish(wait > 0
            ? "Too many attempts. Please wait " + (wait === 1 ? "a second" : wait < 90 ? wait + " seconds" : Math.ceil(wait / 60) + " minutes") + " and try again."
            : "Too many attempts. Please wait a moment and try again.");
        }
        // Only the service's own answer settles the attempt: a payment for a
        // 2xx, its JSON error otherwise. Any 5xx may come after the payment
        // was made (the service says 503 then, but a proxy or CDN in front
        // says 500, 520 or 524), and a proxy's or a firewall's own page, 200
        // or 404, says nothing of what the attempt did: the outcome is
        // unknown, so ask again with the same key.
        var settled = res.ok ? isPayment(data) : Boolean(data) && typeof data.error === "string";
        if (res.status >= 500 || !settled) {
          return retryOrFail(json, key, tries, message.replace(/\.?$/, ". Please try again."));
        }
        keepAttempt(null);
        doubtful = false;
        if (res.ok) {
          keepPaid(key);
          return succeed(data);
        }
        if (res.status === 409 && earlier.length) {
          // Used: perhaps by an earlier attempt of this tab whose answer was lost.
          return findPaid(earlier).then(function (result) {
            if (result) return succeed(result);
            retire();
            // An earlier attempt still unanswered may yet be what paid it.
            finish(message + "." + (earlier.length ? "" : NOTHING_TAKEN));
          });
        }
        if (res.status === 402) {
          // Marked at the field, as a refused number is, so its description
          // says why when the focus lands there; the next check clears it.
          var declined = number && !number.disabled ? number : null;
          if (declined) setError(declined, message + ".");
          finish(message + ". Try again with another card or payment method.", declined);
        } else if (res.status === 404 || res.status === 409 || res.status === 410) {
          // The link can no longer be paid: retrying cannot help. The
          // attempt that hears so was refused, or its hold voided, never
          // charged; a customer who paid in another tab must not read it as
          // their payment failing, hence "this attempt".
          retire();
          finish(message + "." + NOTHING_TAKEN);
        } else {
          finish(message.replace(/\.?$/, "."), res.status === 400 ? refusedField(message) : null);
        }
      });
    }, function () {
      retryOrFail(json, key, tries, "We could not reach the payment service. Check your connection and try again.");
    });
  }

  if (cancel) cancel.addEventListener("click", function (event) {
    if (!cancel.hasAttribute("aria-disabled")) return;
    event.preventDefault();
    if (!busy) announce("Your payment may have gone through. Reload this page to see whether it did before you leave.", "error");
  });

  showMethod();
})();
