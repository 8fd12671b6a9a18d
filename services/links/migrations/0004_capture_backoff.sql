ALTER TABLE "payments" ADD COLUMN "capture_attempts" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "payments" ADD COLUMN "capture_retry_at" timestamp (3) with time zone;