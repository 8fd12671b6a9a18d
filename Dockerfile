# One image for the three processes; docker-compose.yml picks the entry (the
# gateway by default).
# The build stage compiles TypeScript to dist/ with the dev dependencies; the
# runtime stage holds only dist/ and the production dependencies, and runs
# `node dist/...` directly: no npm and no tsx between a signal and the
# process, so SIGTERM reaches it and it drains (compose adds an init as PID 1).

# Node.js 24, an LTS line (supported to April 2028; 20 ended in April 2026).
# CI runs the suite and the fault suite on exactly this version
# (test/support/image-node.sh reads it from here), so bump it here only.
ARG NODE_VERSION=24.21.0

FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# npm ci's postinstall applies them (patch-package).
COPY patches ./patches
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY proto ./proto
COPY services ./services
COPY gateway ./gateway
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

FROM node:${NODE_VERSION}-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
USER node
# 9091 and 9092: the gateway's and the LinkService's /metrics, kept off their
# API ports (the notifier's shares 8090 with its health checks).
EXPOSE 8080 50051 8090 9091 9092
STOPSIGNAL SIGTERM
# node with our V8 flags (services/dev/node-flags.ts says why; the flags are
# not allowed in NODE_OPTIONS); compose's command names the entry.
ENTRYPOINT ["node", "--max-semi-space-size=16", "--max-old-space-size=128", "--no-allocation-site-pretenuring"]
CMD ["dist/gateway/main.js"]
