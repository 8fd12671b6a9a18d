# One image for the three processes; docker-compose.yml picks the npm script.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY tsconfig.json ./
COPY proto ./proto
COPY services ./services
COPY gateway ./gateway
USER node
EXPOSE 8080 50051 8090
CMD ["npm", "run", "start:gateway"]
