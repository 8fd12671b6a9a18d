CREATE TABLE "open_holds" (
	"reference" text PRIMARY KEY NOT NULL,
	"link_id" text NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"release_at" timestamp (3) with time zone NOT NULL,
	"releasing" boolean DEFAULT false NOT NULL
);
--> statement-breakpoint
ALTER TABLE "open_holds" ADD CONSTRAINT "open_holds_link_id_links_id_fk" FOREIGN KEY ("link_id") REFERENCES "public"."links"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "open_holds_release_at_idx" ON "open_holds" USING btree ("release_at");