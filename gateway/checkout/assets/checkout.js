// The checkout form's behaviour. Plain browser JavaScript, inlined into the
// page under a CSP hash, so it must not depend on anything external. The
// server checks everything again; these checks only save a round trip.
(function () {
  "use strict";
  var form = document.getElementById("pay-form");
  if (!form) return;
  var status = document.getElementById("status");
  var button = document.getElementById("pay-button");
  var cardFields = document.getElementById("card-fields");
  var bankFields = document.getElementById("bank-fields");
  var success = document.getElementById("success");
  var number = document.getElementById("card-number");
  var expiry = document.getElementById("card-expiry");
  var cvc = document.getElementById("card-cvc");
  var name = document.getElementById("card-name");
  var payLabel = button.textContent;
  // Relative to the page, so a CHECKOUT_BASE_URL with a path prefix works.
  var payUrl = location.pathname.replace(/\/+$/, "") + "/pay";
  var busy = false;
  // The attempt whose outcome is unknown (its answers lost, or 503s until the
  // retries ran out): clicking Pay again with the same details asks again
  // with its key, so a payment that went through is shown, not refused as
  // "already used". Any definite answer ends it.
  var unsettled = null;

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
    var now = new Date();
    var expiryError = !expiry.value.trim() ? "Enter the expiry date." :
      !exp ? "Enter the expiry date as MM/YY." :
      exp.year * 12 + exp.month < now.getFullYear() * 12 + now.getMonth() + 1 ? "This card has expired." : "";
    var cvcError = /^\d{3,4}$/.test(cvc.value.trim()) ? "" : "Enter the 3 or 4 digit security code.";
    [[number, numberError], [expiry, expiryError], [cvc, cvcError]].forEach(function (pair) {
      setError(pair[0], pair[1]);
      if (pair[1]) problems.push(pair);
    });
    return problems;
  }

  function finish(message, kind) {
    busy = false;
    form.removeAttribute("aria-busy");
    button.disabled = false;
    button.textContent = payLabel;
    announce(message, kind);
  }

  function succeed(result) {
    var target = typeof result.redirect_url === "string" ? result.redirect_url : "";
    if (/^https?:\/\//i.test(target)) {
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
    if (busy) return;
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
    busy = true;
    form.setAttribute("aria-busy", "true");
    button.disabled = true;
    button.textContent = "Processing\u2026";
    announce("Processing your payment\u2026", "info");
    // One key per attempt; every retry of this attempt sends the same one,
    // so a payment whose answer was lost is answered, never charged twice
    // and never told the link is used (CONTRACT "Retrying a payment").
    var json = JSON.stringify(body);
    if (!unsettled || unsettled.json !== json) unsettled = { json: json, key: newKey() };
    send(json, unsettled.key, 0);
  });

  // Waits before each retry of an attempt: about 8 s in all before giving up.
  var RETRY_DELAYS_MS = [300, 700, 1500, 2500, 3500];

  function newKey() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return (b < 16 ? "0" : "") + b.toString(16); }).join("");
  }

  function retryOrFail(json, key, tries, message) {
    if (tries >= RETRY_DELAYS_MS.length) return finish(message, "error");
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
        var message = data && typeof data.error === "string" ? data.error : "Something went wrong. Please try again.";
        if (res.status === 503 || res.status === 502 || res.status === 504) {
          // The outcome may be unknown: ask again with the same key.
          return retryOrFail(json, key, tries, message.replace(/\.?$/, ". Please try again."));
        }
        if (res.status === 429) {
          // Refused before it was tried: whatever an earlier try of this attempt did is still unknown.
          var wait = Number(res.headers.get("retry-after"));
          return finish(wait > 0
            ? "Too many attempts. Please wait " + (wait === 1 ? "a second" : wait < 90 ? wait + " seconds" : Math.ceil(wait / 60) + " minutes") + " and try again."
            : "Too many attempts. Please wait a moment and try again.", "error");
        }
        unsettled = null;
        if (res.ok) return succeed(data);
        if (res.status === 402) {
          finish(message + ". Try again with another card or payment method.", "error");
          if (number && !number.disabled) number.focus();
        } else if (res.status === 404 || res.status === 409 || res.status === 410) {
          // The link can no longer be paid: retrying cannot help.
          finish(message + ".", "error");
          button.disabled = true;
        } else {
          finish(message.replace(/\.?$/, "."), "error");
        }
      });
    }, function () {
      retryOrFail(json, key, tries, "We could not reach the payment service. Check your connection and try again.");
    });
  }

  showMethod();
})();
