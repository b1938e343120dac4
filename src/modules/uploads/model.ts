/** The upload route's wire types: the route validates with them and the service answers their static types. */
import { t } from "elysia";
import { Text } from "../../http/text";

export const UploadModel = {
  request: t.Object({
    fileName: Text({
      minLength: 1,
      maxLength: 512,
      description: "Path inside the account's folder, such as chat/photo.png; normalised to NFKC",
    }),
    fileType: Text({ minLength: 1, maxLength: 255, description: 'Extension ("png") or MIME type ("image/png")' }),
    fileSize: t.Integer({
      minimum: 1,
      maximum: 5_368_709_120,
      description: "The file's size in bytes, at most UPLOAD_MAX_BYTES: the upload must be exactly this long",
    }),
  }),
  response: t.Object({
    presigned_url: t.String({ description: "PUT the file here, with the Content-Type and Content-Length given below" }),
    key: t.String({ description: "The object's key: the account id, a slash, then fileName as normalised" }),
    content_type: t.String(),
    content_length: t.Integer({
      description: "The size signed into the URL: the PUT must carry exactly this many bytes",
    }),
    expires_in: t.Integer({ description: "Seconds the URL stays valid" }),
  }),
};

export type PresignedUpload = typeof UploadModel.response.static;
