/** The upload route's wire types: the route validates with them and the service answers their static types. */
import { t } from "elysia";
import { Text } from "../../http/text";

export const UploadModel = {
  request: t.Object({
    fileName: Text({
      minLength: 1,
      maxLength: 512,
      description: "Path inside the account's folder, such as chat/photo.png",
    }),
    fileType: Text({ minLength: 1, maxLength: 255, description: 'Extension ("png") or MIME type ("image/png")' }),
  }),
  response: t.Object({
    presigned_url: t.String({ description: "PUT the file here, with the Content-Type given below" }),
    key: t.String({ description: "The object's key: the account id, a slash, then fileName" }),
    content_type: t.String(),
    expires_in: t.Integer({ description: "Seconds the URL stays valid" }),
  }),
};

export type PresignedUpload = typeof UploadModel.response.static;
