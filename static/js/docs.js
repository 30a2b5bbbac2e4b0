// The API reference at /docs: Swagger UI (static/vendor/swagger-ui-bundle-*.js, a classic script
// that defines `SwaggerUIBundle`) drawing the app's own /openapi.json. Nothing leaves the server:
// no validator badge (it would ask validator.swagger.io), no external links followed on load.

const SwaggerUIBundle = globalThis.SwaggerUIBundle;

SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  docExpansion: "list",
  defaultModelsExpandDepth: 0,
  tryItOutEnabled: false,
  displayRequestDuration: true,
  presets: [SwaggerUIBundle.presets.apis],
  plugins: [SwaggerUIBundle.plugins.DownloadUrl],
  layout: "BaseLayout",
});
