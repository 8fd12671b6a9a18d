// The payment processor behind CompletePayment. Authorize first and capture
// only once the link's transition has committed; an attempt that loses the
// race voids its authorization, so it never leaves a charge behind.
import { randomUUID } from "node:crypto";

export type CardInput = { number: string; expMonth: number; expYear: number; cvc: string; name?: string };

export interface AuthorizeRequest {
  /**
   * The idempotency key of this authorization: the processor holds funds at
   * most once per reference, and `release` finds the hold by it.
   */
  reference: string;
  amount: bigint;
  currency: string;
  method: "card" | "bank_transfer";
  card?: CardInput;
}

export type Authorization =
  | { approved: true; authorizationId: string; transactionId: string }
  | { approved: false };

export interface PaymentProcessor {
  readonly name: string;
  authorize(req: AuthorizeRequest): Promise<Authorization>;
  /** Idempotent: capturing a captured authorization again succeeds and moves no more money. */
  capture(authorizationId: string): Promise<void>;
  /** Idempotent, like capture. */
  void(authorizationId: string): Promise<void>;
  /**
   * Voids the hold made under `reference`, if any: for an authorization
   * whose answer was never recorded (the process died, the answer was lost).
   * Idempotent, and a reference that never held anything is released too.
   */
  release(reference: string): Promise<void>;
}

const SANDBOX_AUTHORIZATION = /^auth-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const APPROVED_TEST_CARDS = new Set(["4242424242424242", "5555555555554444"]);

/**
 * The test environment's processor: no money moves. The two documented test
 * cards are approved, every other card is declined, bank transfers succeed.
 * It keeps the fate of each authorization so tests can see that losers void.
 */
export function createSandboxProcessor() {
  const authorizations = new Map<string, "authorized" | "captured" | "voided">();
  const byReference = new Map<string, string>();
  // References released before any hold was made under them: a late authorize finds its hold void at once.
  const released = new Set<string>();
  const settle = (id: string, to: "captured" | "voided") => {
    const state = authorizations.get(id);
    if (state === to) return; // a retry of the same call
    // Holds live in this process's memory: one of ours that it does not know
    // was made before a restart, and the capture job may still settle it.
    const forgotten = state === undefined && to === "captured" && SANDBOX_AUTHORIZATION.test(id);
    if (state !== "authorized" && !forgotten) throw new Error(`authorization ${id} is not open`);
    authorizations.set(id, to);
  };
  return {
    name: "sandbox",
    authorizations,
    byReference,
    async authorize(req: AuthorizeRequest): Promise<Authorization> {
      if (req.method === "card" && !APPROVED_TEST_CARDS.has(req.card?.number ?? "")) return { approved: false };
      const earlier = byReference.get(req.reference);
      if (earlier) return { approved: true, authorizationId: earlier, transactionId: `txn-${earlier.slice(5)}` };
      const authorizationId = `auth-${randomUUID()}`;
      authorizations.set(authorizationId, released.has(req.reference) ? "voided" : "authorized");
      byReference.set(req.reference, authorizationId);
      return { approved: true, authorizationId, transactionId: `txn-${authorizationId.slice(5)}` };
    },
    async capture(id: string) {
      settle(id, "captured");
    },
    async void(id: string) {
      settle(id, "voided");
    },
    async release(reference: string) {
      const id = byReference.get(reference);
      if (!id) released.add(reference);
      else if (authorizations.get(id) === "authorized") settle(id, "voided");
      // A captured one is a payment: releasing it would be a bug, and says so.
      else if (id && authorizations.get(id) === "captured") throw new Error(`authorization ${id} is captured`);
    },
  } satisfies PaymentProcessor & { authorizations: Map<string, string>; byReference: Map<string, string> };
}

