-- A payment commits only before its link's expires_at, judged at COMMIT. The
-- pay's UPDATE compares expires_at with the LinkService's clock as its
-- transaction began; a transaction that then stalled (waiting on the link's
-- row lock, or its LinkService frozen before COMMIT) had committed a payment
-- after expires_at, when readers had already been told "Link has expired".
-- updated_at is that clock, written by the UPDATE; the time since the
-- transaction began is the database's own, so copies need not share the
-- database's clock, only each other's. Refused, the transaction rolls back and
-- the pay answers 410 as for any expired link (payments.ts).
CREATE FUNCTION "paylink_paid_before_expiry"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.updated_at + (clock_timestamp() - transaction_timestamp()) >= NEW.expires_at THEN
    RAISE EXCEPTION 'link % expired before its payment committed', NEW.id USING ERRCODE = 'PL410';
  END IF;
  RETURN NULL;
END
$$;--> statement-breakpoint
CREATE CONSTRAINT TRIGGER "links_paid_before_expiry" AFTER UPDATE OF "status" ON "links"
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (NEW.status = 'used' AND OLD.status <> 'used')
  EXECUTE FUNCTION "paylink_paid_before_expiry"();
